"""Where a stream's records live: files beside a local checkpoint (replaced atomically),
objects beside an S3 one through the connection the caller opened it with (else the AWS
environment's, one per location), and host-local things (logs, the launch lock) on the
launching host. A connection is passed, never remembered for others."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_streamstate.engine.checkpoint.filesystems import open_checkpoint_fs
from airflow_provider_streamstate.engine.checkpoint.sidecar import open_sidecar
from airflow_provider_streamstate.engine.core.errors import UsageError


class RecordingClient:
    """Just enough of a boto3 S3 client to see which objects a sidecar writes and reads."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def put_object(self, *, Bucket: str, Key: str, Body: bytes, **_: object) -> dict[str, object]:  # noqa: N803
        self.objects[f"{Bucket}/{Key}"] = Body
        return {}

    def get_object(self, *, Bucket: str, Key: str) -> dict[str, object]:  # noqa: N803
        import io

        from botocore.exceptions import ClientError

        if f"{Bucket}/{Key}" not in self.objects:
            raise ClientError({"Error": {"Code": "NoSuchKey"}, "ResponseMetadata": {"HTTPStatusCode": 404}}, "GetObject")
        return {"Body": io.BytesIO(self.objects[f"{Bucket}/{Key}"])}

    def delete_object(self, *, Bucket: str, Key: str) -> dict[str, object]:  # noqa: N803
        self.objects.pop(f"{Bucket}/{Key}", None)
        return {}


def test_records_beside_a_local_checkpoint_are_files_replaced_whole(tmp_path: Path) -> None:
    side = open_sidecar(f"file://{tmp_path}/ckpt")
    assert side.fs.local_path is not None and side.location == str(tmp_path / "ckpt")
    assert side.read("_streamstate/stop.json") is None
    side.write("_streamstate/stop.json", b'{"a": 1}')
    side.write("_streamstate/stop.json", b'{"a": 2}')
    assert (tmp_path / "ckpt/_streamstate/stop.json").read_bytes() == b'{"a": 2}'
    assert sorted(p.name for p in (tmp_path / "ckpt/_streamstate").iterdir()) == ["stop.json"]  # no temp left
    side.delete("_streamstate/stop.json")
    side.delete("_streamstate/stop.json")  # absent: not an error
    assert side.read("_streamstate/stop.json") is None and side.local_dir == tmp_path / "ckpt"


def test_records_beside_an_s3_checkpoint_are_objects_and_its_logs_stay_on_this_host(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("STREAMSTATE_HOME", str(tmp_path / "home"))
    client = RecordingClient()
    side = open_sidecar(open_checkpoint_fs("s3a://ckpts/prod/orders", connection=client))
    assert side.fs.local_path is None and side.location == "s3a://ckpts/prod/orders"
    side.write("_streamstate/heartbeat.json", b"{}")
    assert client.objects == {"ckpts/prod/orders/_streamstate/heartbeat.json": b"{}"}
    assert side.read("_streamstate/heartbeat.json") == b"{}" and side.read("_streamstate/stop.json") is None
    assert side.where("_streamstate/heartbeat.json") == "s3a://ckpts/prod/orders/_streamstate/heartbeat.json"
    assert side.local_dir.is_relative_to(tmp_path / "home" / "s3" / "ckpts")
    side.delete("_streamstate/heartbeat.json")
    assert client.objects == {}


def test_two_connections_to_one_location_do_not_mix(tmp_path, monkeypatch) -> None:
    """What one task opened with its connection is never what another reaches the same
    location through: each writes with its own client, and a location named as text is
    opened with the environment's (the same sidecar each time: a driver beats often)."""
    monkeypatch.setenv("STREAMSTATE_HOME", str(tmp_path / "home"))
    a, b = RecordingClient(), RecordingClient()
    side_a = open_sidecar(open_checkpoint_fs("s3a://ckpts/prod/orders", connection=a))
    side_b = open_sidecar(open_checkpoint_fs("s3a://ckpts/prod/orders", connection=b))
    side_a.write("_streamstate/stop.json", b"a")
    side_b.write("_streamstate/stop.json", b"b")
    assert (a.objects, b.objects) == ({"ckpts/prod/orders/_streamstate/stop.json": b"a"},
                                      {"ckpts/prod/orders/_streamstate/stop.json": b"b"})
    from_env = open_sidecar("s3a://ckpts/prod/orders")
    assert from_env.fs.client not in (a, b) and open_sidecar("s3://ckpts/prod/orders/") is from_env


@pytest.mark.parametrize("location", ["gs://bucket/ckpt", "viewfs://cluster/ckpt", ""])
def test_a_checkpoint_that_cannot_hold_records_is_refused_with_what_to_do(location: str) -> None:
    with pytest.raises(UsageError) as exc:
        open_sidecar(location)
    assert "; " in exc.value.one_line()
