"""A swap changes a checkpoint so that a crash at any instant leaves it as it was, as it was
to become, or fenced (its `metadata` not JSON: every Spark refuses it), and a fenced one is
finished from its record. Each crash is real: a process that SIGKILLs itself at the named
point (engine/core/crash_points.py). A create-only put that loses its race, and a
precondition that fails, leave the checkpoint as it was. (The same swaps on S3 and HDFS, and
Spark refusing a fenced checkpoint: tests/integration/test_swap_crashes.py.)"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
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
from tests.unit.fake_checkpoint import make_checkpoint, store_dirs, write

REPO = Path(__file__).resolve().parents[2]
POINTS = ["swap.prepared", "swap.recorded", "swap.fenced", "swap.exclusive-placed", "swap.removed",
          "swap.half-placed", "swap.placed", "swap.unfenced"]


def tree(root: Path) -> dict[str, str]:
    """Every file below `root` but our own records, by content."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and "_streamstate" not in p.parts}


def a_checkpoint_and_its_next_batch(tmp_path: Path) -> tuple[Path, Path, list[Put], dict[str, str]]:
    """A checkpoint at batch 2, a work copy holding it plus batch 3 (offsets, commit, state
    files of version 4 in every partition and in a new one), the puts that add batch 3, and
    what the checkpoint holds once it is added."""
    ckpt = make_checkpoint(tmp_path / "ckpt", batches=3)
    for d in store_dirs(ckpt):
        for v in range(1, 4):
            write(d / f"{v}.delta", f"delta {v} of {d.name}")
    work = tmp_path / "work"
    subprocess.run(["cp", "-a", str(ckpt), str(work)], check=True)
    new = {"offsets/3": "v1\n{}\n{}", "commits/3": "v1\n{}", "state/0/0/4.delta": "four",
           "state/0/1/4.delta": "four too", "state/0/7/4.delta": "a new partition"}
    for rel, text in new.items():
        write(work / rel, text)
    puts = [Put(rel, len(text), exclusive=rel.startswith(("offsets/", "commits/"))) for rel, text in new.items()]
    expected = tree(ckpt) | {rel: hashlib.sha256(t.encode()).hexdigest() for rel, t in new.items()}
    return ckpt, work, puts, expected


def _record(ckpt: Path, work: Path, puts: list[Put]) -> SwapRecord:
    metadata = (ckpt / "metadata").read_bytes()
    return new_record("rescale", "batch 3 on batch 2", open_checkpoint_fs(str(work)), puts, (),
                      metadata=metadata, metadata_before=metadata)


@pytest.mark.parametrize("point", POINTS)
def test_a_swap_killed_at_any_point_leaves_the_old_checkpoint_a_fenced_one_or_the_new_one_and_recovers(
    tmp_path, point
) -> None:
    ckpt, work, puts, expected = a_checkpoint_and_its_next_batch(tmp_path)
    old = tree(ckpt)
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        from airflow_provider_streamstate.engine.checkpoint.filesystems import open_checkpoint_fs
        from airflow_provider_streamstate.engine.checkpoint.swap import Put, apply_swap, new_record
        puts = [Put(*p) for p in {[(p.rel, p.size, p.exclusive) for p in puts]!r}]
        work = open_checkpoint_fs({str(work)!r})
        meta = open({str(ckpt / "metadata")!r}, "rb").read()
        apply_swap(open_checkpoint_fs({str(ckpt)!r}), work,
                   new_record("rescale", "batch 3 on batch 2", work, puts, (), metadata=meta, metadata_before=meta))
    """)
    env = {**os.environ, "STREAMSTATE_CRASH_AT": point}
    assert subprocess.run([sys.executable, "-c", script], env=env).returncode == -9  # SIGKILLed there
    now = tree(ckpt)
    fenced = (ckpt / "metadata").read_bytes().startswith(FENCE_TOKEN.encode())
    if fenced:
        assert (ckpt / SWAP_FILE).exists()
    else:  # every file as it was, or as it was to become
        assert now in (old, expected), point
    assert fenced == (point in ("swap.fenced", "swap.exclusive-placed", "swap.removed", "swap.half-placed",
                                "swap.placed")), point

    actions = recover_swap(open_checkpoint_fs(str(ckpt)))
    assert len(actions) == 1, actions
    assert not (ckpt / SWAP_FILE).exists()
    assert tree(ckpt) == (old if point in ("swap.prepared", "swap.recorded") else expected), point
    assert recover_swap(open_checkpoint_fs(str(ckpt))) == []  # nothing more to do


def test_a_swap_puts_every_file_in_and_records_what_it_did(tmp_path) -> None:
    ckpt, work, puts, expected = a_checkpoint_and_its_next_batch(tmp_path)
    apply_swap(open_checkpoint_fs(str(ckpt)), open_checkpoint_fs(str(work)), _record(ckpt, work, puts))
    assert tree(ckpt) == expected and not (ckpt / SWAP_FILE).exists()
    last = json.loads((ckpt / LAST_SWAP_FILE).read_text())
    assert (last["kind"], last["description"]) == ("rescale", "batch 3 on batch 2")


def test_a_batch_written_meanwhile_wins_its_race_and_the_swap_changes_nothing(tmp_path) -> None:
    """A query that wrote batch 3's offsets first (it was running): the create-only put
    loses, what the swap placed is taken back, the fence is lifted."""
    ckpt, work, puts, _ = a_checkpoint_and_its_next_batch(tmp_path)
    write(ckpt / "offsets" / "3", "the running query's batch 3")
    old = tree(ckpt)
    puts = sorted(puts, key=lambda p: p.rel != "commits/3")  # its commit placed first, then taken back
    with pytest.raises(SwapRefused, match="was written meanwhile") as refused:
        apply_swap(open_checkpoint_fs(str(ckpt)), open_checkpoint_fs(str(work)), _record(ckpt, work, puts))
    assert "nothing was changed" in refused.value.one_line()
    assert tree(ckpt) == old and not (ckpt / SWAP_FILE).exists()


def test_a_precondition_failing_after_the_fence_lifts_it_and_changes_nothing(tmp_path) -> None:
    ckpt, work, puts, _ = a_checkpoint_and_its_next_batch(tmp_path)
    old = tree(ckpt)
    calls: list[int] = []

    def check() -> None:
        calls.append(1)
        if len(calls) == 2:  # the check made with the fence up
            raise StreamRunningError("a query started meanwhile")

    with pytest.raises(StreamRunningError):
        apply_swap(open_checkpoint_fs(str(ckpt)), open_checkpoint_fs(str(work)), _record(ckpt, work, puts),
                   check=check)
    assert tree(ckpt) == old and not (ckpt / SWAP_FILE).exists()


def test_one_swap_at_a_time_and_a_fenced_checkpoint_whose_source_lost_a_file_stays_fenced(tmp_path) -> None:
    ckpt, work, puts, _ = a_checkpoint_and_its_next_batch(tmp_path)
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        from airflow_provider_streamstate.engine.checkpoint.filesystems import open_checkpoint_fs
        from airflow_provider_streamstate.engine.checkpoint.swap import Put, apply_swap, new_record
        puts = [Put(*p) for p in {[(p.rel, p.size, p.exclusive) for p in puts]!r}]
        work = open_checkpoint_fs({str(work)!r})
        meta = open({str(ckpt / "metadata")!r}, "rb").read()
        apply_swap(open_checkpoint_fs({str(ckpt)!r}), work,
                   new_record("rescale", "batch 3 on batch 2", work, puts, (), metadata=meta, metadata_before=meta))
    """)
    env = {**os.environ, "STREAMSTATE_CRASH_AT": "swap.fenced"}
    assert subprocess.run([sys.executable, "-c", script], env=env).returncode == -9
    with pytest.raises(UnsupportedCheckpointError, match="in the middle of a swap") as busy:
        apply_swap(open_checkpoint_fs(str(ckpt)), open_checkpoint_fs(str(work)), _record(ckpt, work, puts))
    assert "streamstate stream recover --checkpoint" in busy.value.one_line()
    (work / "state" / "0" / "7" / "4.delta").unlink()  # the work copy damaged by hand
    with pytest.raises(UnsupportedCheckpointError, match="cannot be finished: state/0/7/4.delta") as stuck:
        recover_swap(open_checkpoint_fs(str(ckpt)))
    assert "restore a snapshot" in stuck.value.one_line()
    assert (ckpt / "metadata").read_bytes().startswith(FENCE_TOKEN.encode())


@pytest.mark.parametrize("hostile", [
    {"puts": [["../../etc/passwd", 1, False]]},
    {"removes": ["/abs/path"]},
    {"phase": "whatever"},
])
def test_a_hostile_swap_record_is_refused_before_anything_is_moved(tmp_path, hostile) -> None:
    ckpt, work, puts, _ = a_checkpoint_and_its_next_batch(tmp_path)
    record = json.loads(_record(ckpt, work, puts).to_json()) | hostile
    write(ckpt / SWAP_FILE, json.dumps(record))
    write(ckpt / "metadata", f"{FENCE_TOKEN} {{}}")
    before = tree(ckpt)
    with pytest.raises(UnsupportedCheckpointError, match="is unreadable"):
        recover_swap(open_checkpoint_fs(str(ckpt)))
    assert tree(ckpt) == before
