"""The Airflow face of replication, on local stores: the trigger serialises to the kwargs
that rebuild it and fires once the snapshot is complete; the sensor pokes once, then
defers, and fails without retry on a damaged replica or bad input; the operator reads
`latest`/`all`/ids/JSON lists and stream specs or names, and bad input fails it at once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.engine.lifecycle.replicate import replicate
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.stores.base import blob_key
from airflow_provider_streamstate.operators.replicate import (
    ReplicateSnapshotsOperator,
    snapshot_choice,
    stream_and_store,
)
from airflow_provider_streamstate.sensors.replicate import SnapshotReplicaSensor
from airflow_provider_streamstate.spec import StreamSpec
from airflow_provider_streamstate.triggers.replicate import SnapshotReplicaTrigger
from tests.unit.fake_checkpoint import make_checkpoint
from tests.unit.test_timelines import grow


@pytest.fixture
def setup(tmp_path: Path):  # noqa: ANN201
    """Stream `orders` with one snapshot in `src`; `dst` empty."""
    ckpt = make_checkpoint(tmp_path / "ckpt", batches=1)
    grow(ckpt, 2)
    src, dst = tmp_path / "src", tmp_path / "dst"
    sid = create_snapshot(str(ckpt), LocalStore(src, fsync=False), "orders").manifest.snapshot_id
    spec = StreamSpec(name="orders", checkpoint=str(ckpt), store=f"file://{src}")
    return spec, f"file://{dst}", sid


def run_trigger(trigger: Any, timeout: float = 10.0) -> list[Any]:
    async def collect() -> list[Any]:
        return [ev async for ev in trigger.run()]

    return asyncio.run(asyncio.wait_for(collect(), timeout))


@pytest.mark.parametrize("trigger", [
    SnapshotReplicaTrigger(stream="orders", store="s3://dr/x"),
    SnapshotReplicaTrigger(stream="orders", store="s3://dr/x", storage_conn_id="aws_dr", snapshot="000000000002-20261121T000000000000Z",
                           source_store="s3://primary/x", source_storage_conn_id="aws_primary", poke_interval=2.5),
], ids=["defaults", "all"])
def test_the_trigger_round_trips_through_its_serialised_kwargs(trigger: Any) -> None:
    path, kwargs = trigger.serialize()
    assert path == "airflow_provider_streamstate.triggers.replicate.SnapshotReplicaTrigger"
    assert type(trigger)(**kwargs).serialize() == trigger.serialize()


def test_the_sensor_defers_until_the_replica_is_complete_and_the_trigger_then_fires(setup) -> None:
    spec, dst, sid = setup
    sensor = SnapshotReplicaSensor(task_id="wait", stream=spec.to_dict(), store=dst, deferrable=True, poke_interval=0.2,
                                   timeout=60)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    trigger = deferred.value.trigger
    assert trigger.serialize()[1] == {
        "stream": "orders", "store": dst, "storage_conn_id": None, "snapshot": "latest", "source_store": spec.store,
        "source_storage_conn_id": None, "poke_interval": 0.2,
    }
    replicate(LocalStore(spec.store[len("file://"):]), LocalStore(dst[len("file://"):]), "orders")
    [event] = run_trigger(trigger)
    assert event.payload["status"] == "success" and event.payload["result"]["snapshot_id"] == sid
    assert sensor.execute_complete({}, event.payload)["blobs_missing"] == 0
    # Ready at the first poke: no deferral. A bare stream name waits on the store's own latest.
    by_name = SnapshotReplicaSensor(task_id="now", stream="orders", store=dst, snapshot=sid, deferrable=True)
    assert by_name.execute({})["snapshot_id"] == sid


def test_a_damaged_replica_fails_the_sensor_without_retry(setup) -> None:
    spec, dst, sid = setup
    target = LocalStore(dst[len("file://"):])
    replicate(LocalStore(spec.store[len("file://"):]), target, "orders")
    some_blob = next(p for p in (target.root / "blobs").rglob("*") if p.is_file())
    some_blob.unlink()
    assert not target.has_blob(some_blob.name) and (target.root / blob_key(some_blob.name)) == some_blob
    sensor = SnapshotReplicaSensor(task_id="wait", stream="orders", store=dst, snapshot=sid)
    with pytest.raises(AirflowFailException, match="1 of its .* blobs are missing"):
        sensor.poke({})
    [event] = run_trigger(SnapshotReplicaTrigger(stream="orders", store=dst, snapshot=sid))
    assert event.payload["status"] == "failed"
    with pytest.raises(AirflowFailException, match="missing"):
        sensor.execute_complete({}, event.payload)
    with pytest.raises(AirflowException, match="unexpected event"):
        sensor.execute_complete({}, {"status": "odd"})


@pytest.mark.parametrize(("value", "expected"), [
    ("latest", (["latest"], False)),
    ("all", ([], True)),
    ("", (["latest"], False)),
    ("000000000002-20261121T000000000000Z", (["000000000002-20261121T000000000000Z"], False)),
    (["a", "b"], (["a", "b"], False)),
    ('["a", "b"]', (["a", "b"], False)),
])
def test_the_operator_reads_every_way_of_naming_snapshots(value: Any, expected: Any) -> None:
    assert snapshot_choice(value) == expected


@pytest.mark.parametrize("value", [[], [1], 7, "[not json", None])
def test_anything_else_is_bad_input(value: Any) -> None:
    with pytest.raises(UsageError):
        snapshot_choice(value)


def test_a_stream_is_a_spec_or_a_name_with_its_store() -> None:
    spec = StreamSpec(name="orders", checkpoint="/c", store="s3://p/x", storage_conn_id="aws_p")
    assert stream_and_store(spec.to_dict(), None, None) == ("orders", "s3://p/x", "aws_p")
    assert stream_and_store(spec, "s3://q/y", None) == ("orders", "s3://q/y", None)
    assert stream_and_store("orders", "/s", None) == ("orders", "/s", None)
    with pytest.raises(UsageError, match="by name only"):
        stream_and_store("orders", None, None)
    with pytest.raises(UsageError, match="invalid stream name"):
        stream_and_store("no/such", "/s", None)


def test_the_operator_replicates_and_a_retry_copies_nothing(setup) -> None:
    spec, dst, sid = setup
    op = ReplicateSnapshotsOperator(task_id="r", stream=spec, destination_store=dst, snapshots="all", parallelism=2)
    first = op.execute({})
    assert [s["snapshot_id"] for s in first["snapshots"]] == [sid] and first["bytes_copied"] > 0
    again = ReplicateSnapshotsOperator(task_id="r", stream="orders", source_store=spec.store, destination_store=dst,
                                       snapshots=sid).execute({})
    assert again["bytes_copied"] == 0 and again["snapshots"][0]["already_present"]


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"snapshots": "000000000009-20261121T000000000000Z"}, "no snapshot 000000000009"),
    ({"snapshots": 5}, "snapshots must be"),
    ({"destination_storage_conn_id": "aws_dr"}, "does not apply to"),
    ({"stream": "orders"}, "by name only"),
])
def test_bad_input_fails_the_operator_without_retry(setup, kwargs: dict[str, Any], words: str) -> None:
    spec, dst, _ = setup
    op = ReplicateSnapshotsOperator(task_id="r", **{"stream": spec, "destination_store": dst, **kwargs})
    with pytest.raises(AirflowFailException, match=words):
        op.execute({})
