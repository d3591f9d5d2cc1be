"""A swap changes a checkpoint so that a crash at any instant leaves it as it was, as it was
to become, or fenced (its `metadata` not JSON: every Spark refuses it), and a fenced one is
finished from its record. Each crash is real: a process that SIGKILLs itself at the named
point (engine/core/crash_points.py). A create-only put that loses its race, and a
precondition that fails, leave the checkpoint as it was. (The same swaps on S3 and HDFS, and
Spark refusing a fenced checkpoint: tests/integration/test_swap_crashes.py.) Every crash
point is tried on a local directory and on S3 (moto); HDFS: the integration test."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_streamstate.engine.checkpoint.filesystems import open_checkpoint_fs
from airflow_provider_streamstate.engine.checkpoint.swap import (
    FENCE_TOKEN,
    LAST_SWAP_FILE,
    SWAP_FILE,
    Put,
    SwapRecord,
    SwapRefused,
    apply_swap,
    new_record,
    recover_swap,
)
from airflow_provider_streamstate.engine.core.errors import StreamRunningError, UnsupportedCheckpointError
from tests.unit.conftest import moto_bucket
from tests.unit.fake_checkpoint import make_checkpoint, store_dirs, write

REPO = Path(__file__).resolve().parents[2]
BUCKET = "swaps"
POINTS = ["swap.prepared", "swap.recorded", "swap.fenced", "swap.exclusive-placed", "swap.removed",
          "swap.half-placed", "swap.placed", "swap.unfenced"]


def tree(root: Path) -> dict[str, str]:
    """Every file below `root` but our own records, by content."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and "_streamstate" not in p.parts}


class Place:
    """Where the checkpoint and its work copy live: a local directory, or an S3 prefix (moto)."""

    def __init__(self, kind: str, tmp_path: Path, endpoint: str | None) -> None:
        self.kind, self.tmp_path, self.endpoint = kind, tmp_path, endpoint
        self.client = moto_bucket(endpoint, BUCKET) if kind == "s3" else None
        self.prefix = tmp_path.name  # unique per test

    def env(self) -> dict[str, str]:
        if self.client is None:
            return {}
        return {"AWS_ENDPOINT_URL": str(self.endpoint), "AWS_ACCESS_KEY_ID": "test",
                "AWS_SECRET_ACCESS_KEY": "secret", "AWS_DEFAULT_REGION": "us-east-1"}

    def put(self, root: Path, name: str) -> str:
        if self.client is None:
            return str(root)
        for p in sorted(root.rglob("*")):
            if p.is_file():
                self.client.put_object(Bucket=BUCKET, Key=f"{self.prefix}/{name}/{p.relative_to(root).as_posix()}",
                                       Body=p.read_bytes())
        return f"s3a://{BUCKET}/{self.prefix}/{name}"

    def fs(self, location: str):  # noqa: ANN201
        return open_checkpoint_fs(location, connection=self.client)

    def tree(self, location: str) -> dict[str, str]:
        if self.client is None:
            return tree(Path(location))
        base = location.removeprefix(f"s3a://{BUCKET}/") + "/"
        out = {}
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=base):
            for o in page.get("Contents", []):
                rel = o["Key"][len(base):]
                if not rel.startswith("_streamstate/"):
                    body = self.client.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read()
                    out[rel] = hashlib.sha256(body).hexdigest()
        return out

    def read(self, location: str, rel: str) -> bytes | None:
        return self.fs(location).read_record(rel)


@pytest.fixture(params=["local", "s3"])
def place(request: pytest.FixtureRequest, tmp_path: Path, moto_endpoint: str) -> Place:
    return Place(request.param, tmp_path, moto_endpoint if request.param == "s3" else None)


def a_checkpoint_and_its_next_batch(tmp_path: Path, place: Place | None = None) -> tuple[str, str, list[Put],
                                                                                         dict[str, str]]:
    """A checkpoint at batch 2, a work copy holding it plus batch 3 (offsets, commit, state
    files of version 4 in every partition and in a new one), the puts that add batch 3, and
    what the checkpoint holds once it is added: its location, the work copy's."""
    place = place or Place("local", tmp_path, None)
    ckpt = make_checkpoint(tmp_path / "ckpt", batches=3)
    for d in store_dirs(ckpt):
        for v in range(1, 4):
            write(d / f"{v}.delta", f"delta {v} of {d.name}")
    work = tmp_path / "ckpt.streamstate-rescale-6"  # a work copy is named after its checkpoint, beside it
    subprocess.run(["cp", "-a", str(ckpt), str(work)], check=True)
    new = {"offsets/3": "v1\n{}\n{}", "commits/3": "v1\n{}", "state/0/0/4.delta": "four",
           "state/0/1/4.delta": "four too", "state/0/7/4.delta": "a new partition"}
    for rel, text in new.items():
        write(work / rel, text)
    puts = [Put(rel, len(text), exclusive=rel.startswith(("offsets/", "commits/"))) for rel, text in new.items()]
    expected = tree(ckpt) | {rel: hashlib.sha256(t.encode()).hexdigest() for rel, t in new.items()}
    return place.put(ckpt, "ckpt"), place.put(work, work.name), puts, expected


def _record(ckpt: str, work: str, puts: list[Put]) -> SwapRecord:
    metadata = open_checkpoint_fs(ckpt).read_record("metadata")
    return new_record("rescale", "batch 3 on batch 2", open_checkpoint_fs(work), puts, (),
                      metadata=metadata, metadata_before=metadata)


SWAP_SCRIPT = """
import sys
sys.path.insert(0, {repo!r})
from airflow_provider_streamstate.engine.checkpoint.filesystems import open_checkpoint_fs
from airflow_provider_streamstate.engine.checkpoint.swap import Put, apply_swap, new_record
puts = [Put(*p) for p in {puts!r}]
target, work = open_checkpoint_fs({ckpt!r}), open_checkpoint_fs({work!r})
meta = target.read_record("metadata")
apply_swap(target, work, new_record("rescale", "batch 3 on batch 2", work, puts, (), metadata=meta,
                                    metadata_before=meta))
"""


def swap_killed_at(point: str, ckpt: str, work: str, puts: list[Put], env: dict[str, str]) -> None:
    script = SWAP_SCRIPT.format(repo=str(REPO), puts=[(p.rel, p.size, p.exclusive) for p in puts], ckpt=ckpt,
                                work=work)
    env = {**os.environ, **env, "STREAMSTATE_CRASH_AT": point}
    assert subprocess.run([sys.executable, "-c", script], env=env).returncode == -9  # SIGKILLed there


@pytest.mark.parametrize("point", POINTS)
def test_a_swap_killed_at_any_point_leaves_the_old_checkpoint_a_fenced_one_or_the_new_one_and_recovers(
    tmp_path, point, place, monkeypatch
) -> None:
    for k, v in place.env().items():
        monkeypatch.setenv(k, v)
    ckpt, work, puts, expected = a_checkpoint_and_its_next_batch(tmp_path, place)
    old = place.tree(ckpt)
    swap_killed_at(point, ckpt, work, puts, place.env())
    now = place.tree(ckpt)
    metadata = place.read(ckpt, "metadata")
    fenced = metadata is not None and metadata.startswith(FENCE_TOKEN.encode())
    if fenced:
        assert place.read(ckpt, SWAP_FILE) is not None
    else:  # every file as it was, or as it was to become
        assert now in (old, expected), point
    assert fenced == (point in ("swap.fenced", "swap.exclusive-placed", "swap.removed", "swap.half-placed",
                                "swap.placed")), point

    actions = recover_swap(place.fs(ckpt))
    assert len(actions) == 1, actions
    assert place.read(ckpt, SWAP_FILE) is None
    assert place.tree(ckpt) == (old if point in ("swap.prepared", "swap.recorded") else expected), point
    assert recover_swap(place.fs(ckpt)) == []  # nothing more to do


def test_a_swap_puts_every_file_in_and_records_what_it_did(tmp_path) -> None:
    ckpt, work, puts, expected = a_checkpoint_and_its_next_batch(tmp_path)
    apply_swap(open_checkpoint_fs(ckpt), open_checkpoint_fs(work), _record(ckpt, work, puts))
    assert tree(Path(ckpt)) == expected and not (Path(ckpt) / SWAP_FILE).exists()
    last = json.loads((Path(ckpt) / LAST_SWAP_FILE).read_text())
    assert (last["kind"], last["description"]) == ("rescale", "batch 3 on batch 2")


def test_a_batch_written_meanwhile_wins_its_race_and_the_swap_changes_nothing(tmp_path) -> None:
    """A query that wrote batch 3's offsets first (it was running): the create-only put
    loses, what the swap placed is taken back, the fence is lifted."""
    ckpt, work, puts, _ = a_checkpoint_and_its_next_batch(tmp_path)
    write(Path(ckpt) / "offsets" / "3", "the running query's batch 3")
    old = tree(Path(ckpt))
    puts = sorted(puts, key=lambda p: p.rel != "commits/3")  # its commit placed first, then taken back
    with pytest.raises(SwapRefused, match="was written meanwhile") as refused:
        apply_swap(open_checkpoint_fs(ckpt), open_checkpoint_fs(work), _record(ckpt, work, puts))
    assert "nothing was changed" in refused.value.one_line()
    assert tree(Path(ckpt)) == old and not (Path(ckpt) / SWAP_FILE).exists()


def test_a_precondition_failing_after_the_fence_lifts_it_and_changes_nothing(tmp_path) -> None:
    ckpt, work, puts, _ = a_checkpoint_and_its_next_batch(tmp_path)
    old = tree(Path(ckpt))
    calls: list[int] = []

    def check() -> None:
        calls.append(1)
        if len(calls) == 2:  # the check made with the fence up
            raise StreamRunningError("a query started meanwhile")

    with pytest.raises(StreamRunningError):
        apply_swap(open_checkpoint_fs(ckpt), open_checkpoint_fs(work), _record(ckpt, work, puts), check=check)
    assert tree(Path(ckpt)) == old and not (Path(ckpt) / SWAP_FILE).exists()


def test_one_swap_at_a_time_and_a_fenced_checkpoint_whose_source_lost_a_file_stays_fenced(tmp_path) -> None:
    ckpt, work, puts, _ = a_checkpoint_and_its_next_batch(tmp_path)
    swap_killed_at("swap.fenced", ckpt, work, puts, {})
    with pytest.raises(UnsupportedCheckpointError, match="in the middle of a swap") as busy:
        apply_swap(open_checkpoint_fs(ckpt), open_checkpoint_fs(work), _record(ckpt, work, puts))
    assert "streamstate stream recover --checkpoint" in busy.value.one_line()
    (Path(work) / "state" / "0" / "7" / "4.delta").unlink()  # the work copy damaged by hand
    with pytest.raises(UnsupportedCheckpointError, match="cannot be finished: state/0/7/4.delta") as stuck:
        recover_swap(open_checkpoint_fs(ckpt))
    assert "restore a snapshot" in stuck.value.one_line()
    assert (Path(ckpt) / "metadata").read_bytes().startswith(FENCE_TOKEN.encode())


@pytest.mark.parametrize(("hostile", "words"), [
    ({"puts": [["../../etc/passwd", 1, False]]}, "is unreadable"),
    ({"removes": ["/abs/path"]}, "is unreadable"),
    ({"phase": "whatever"}, "is unreadable"),
    ({"source": "SOMEWHERE"}, "which is no work copy of"),  # recovery deletes its source
])
def test_a_hostile_swap_record_is_refused_before_anything_is_moved_or_deleted(tmp_path, hostile, words) -> None:
    ckpt, work, puts, _ = a_checkpoint_and_its_next_batch(tmp_path)
    elsewhere = tmp_path / "precious"
    write(elsewhere / "data", "keep me")
    hostile = {k: (str(elsewhere) if v == "SOMEWHERE" else v) for k, v in hostile.items()}
    record = json.loads(_record(ckpt, work, puts).to_json()) | hostile
    write(Path(ckpt) / SWAP_FILE, json.dumps(record))
    write(Path(ckpt) / "metadata", f"{FENCE_TOKEN} {{}}")
    before = tree(Path(ckpt))
    with pytest.raises(UnsupportedCheckpointError, match=words):
        recover_swap(open_checkpoint_fs(ckpt))
    assert tree(Path(ckpt)) == before and (elsewhere / "data").read_text() == "keep me"
