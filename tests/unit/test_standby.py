"""A warm standby holds exactly one snapshot, byte for byte, or says it does not: an update
writes only the files that changed and removes those the snapshot lost, a crash mid-update
never leaves it `current`, a file changed by hand (even with its mtime put back) fails the
verification naming it, and a promoted standby is a normal checkpoint that is never updated
again. Until promoted, nothing starts or snapshots it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from airflow_provider_streamstate.backends.local.checkpoint import LocalStaging
from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.checkpoint.filesystems import open_checkpoint_fs
from airflow_provider_streamstate.engine.checkpoint.liveness import Heartbeat, now_iso, write_heartbeat
from airflow_provider_streamstate.engine.checkpoint.sidecar import refuse_unfinished_restore
from airflow_provider_streamstate.engine.core.errors import (
    StreamRunningError,
    UnsupportedCheckpointError,
    UsageError,
)
from airflow_provider_streamstate.engine.dr.failover import DrRewrite
from airflow_provider_streamstate.engine.dr.standby import (
    check_standby,
    promote_standby,
    read_standby,
    update_standby,
)
from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot, rewritten_files
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from tests.unit.fake_checkpoint import make_checkpoint, store_dirs, write
from tests.unit.test_failover_rewrite import translation


def checkpoint_at(root: Path, batches: int = 3) -> Path:
    make_checkpoint(root, batches=batches)
    for d in store_dirs(root):
        for v in range(1, batches + 1):
            write(d / f"{v}.delta", f"delta {v} of {d.name}" * 50)
    return root


def next_batch(root: Path, batch: int) -> None:
    """Spark ran `batch`: its logs and deltas, and maintenance replaced the deltas up to it
    by a snapshot file (the old ones are gone)."""
    head, offsets = (root / f"offsets/{batch - 1}").read_text().rsplit("\n", 1)
    moved = {t: {p: o + 10 for p, o in parts.items()} for t, parts in json.loads(offsets).items()}
    write(root / f"offsets/{batch}", f"{head}\n{json.dumps(moved)}")
    write(root / f"commits/{batch}", (root / f"commits/{batch - 1}").read_text())
    for d in store_dirs(root):
        write(d / f"{batch + 1}.delta", f"delta {batch + 1}")
        write(d / f"{batch}.snapshot", f"snapshot {batch} of {d.name}")
        for v in range(1, batch + 1):
            (d / f"{v}.delta").unlink(missing_ok=True)


def data_files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and not p.relative_to(root).as_posix().startswith("_streamstate/")}


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path / "store", fsync=False)


def test_a_new_standby_holds_what_a_restore_writes_and_nothing_starts_or_snapshots_it(
    tmp_path: Path, store: LocalStore
) -> None:
    sid = create_snapshot(str(checkpoint_at(tmp_path / "ck")), store, "s").manifest.snapshot_id
    standby = tmp_path / "standby"
    up = update_standby(store, "s", standby)
    assert (up.snapshot_id, up.previous_snapshot_id, up.files_written) == (sid, None, up.files)
    restore_snapshot(store, "s", sid, tmp_path / "restored", fsync=False)
    assert data_files(standby) == data_files(tmp_path / "restored")
    record = read_standby(open_checkpoint_fs(str(standby)))
    assert record is not None and (record.status, record.snapshot_id) == ("current", sid)

    fs = open_checkpoint_fs(str(standby))
    with pytest.raises(UnsupportedCheckpointError, match="is a warm standby .* current"):
        refuse_unfinished_restore(fs)  # what the launcher and the supervised driver ask first
    with pytest.raises(UnsupportedCheckpointError, match="warm standby"):
        create_snapshot(str(standby), store, "s")


def test_an_update_writes_only_the_changed_files_and_removes_those_the_snapshot_lost(
    tmp_path: Path, store: LocalStore
) -> None:
    root = checkpoint_at(tmp_path / "ck")
    a = create_snapshot(str(root), store, "s").manifest
    standby = tmp_path / "standby"
    update_standby(store, "s", standby)
    inodes = {rel: os.stat(standby / rel).st_ino for rel in data_files(standby)}
    next_batch(root, 3)
    b = create_snapshot(str(root), store, "s").manifest

    up = update_standby(store, "s", standby)
    old = {e.path: e.sha256 for e in a.files}
    new = {e.path: e.sha256 for e in b.files}
    changed = {p for p, d in new.items() if old.get(p) != d}
    assert (up.previous_snapshot_id, up.snapshot_id) == (a.snapshot_id, b.snapshot_id)
    assert up.files_written == len(changed) and up.files_removed == len(set(old) - set(new))
    assert up.files_kept == len(new) - len(changed)
    assert up.bytes_written == sum(e.size for e in b.files if e.path in changed)
    for rel in set(new) - changed:  # untouched: the very same file
        assert os.stat(standby / rel).st_ino == inodes[rel], rel
    restore_snapshot(store, "s", b.snapshot_id, tmp_path / "restored", fsync=False)
    assert data_files(standby) == data_files(tmp_path / "restored")
    check = check_standby(store, "s", open_checkpoint_fs(str(standby)), b.snapshot_id)
    assert check.usable and check.files == len(new) and check.files_trusted == check.files and check.files_read == 0

    again = update_standby(store, "s", standby)
    assert again.unchanged and again.files_written == 0
    assert check_standby(store, "s", open_checkpoint_fs(str(standby)), a.snapshot_id).reason == (
        f"stale: it holds {b.snapshot_id} (batch 3), the failover chose {a.snapshot_id}")


def test_an_update_that_crashed_half_way_is_never_current_and_the_next_one_finishes_it(
    tmp_path: Path, store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = checkpoint_at(tmp_path / "ck")
    create_snapshot(str(root), store, "s")
    standby = tmp_path / "standby"
    update_standby(store, "s", standby)
    next_batch(root, 3)
    b = create_snapshot(str(root), store, "s").manifest
    real, calls = LocalStaging.write_blob, []

    def crash_on_the_third(self, store, entry):  # noqa: ANN001, ANN202
        calls.append(entry.path)
        if len(calls) == 3:
            raise KeyboardInterrupt("power cut")
        return real(self, store, entry)

    monkeypatch.setattr(LocalStaging, "write_blob", crash_on_the_third)
    with pytest.raises(KeyboardInterrupt):
        update_standby(store, "s", standby, parallelism=1)
    monkeypatch.setattr(LocalStaging, "write_blob", real)
    fs = open_checkpoint_fs(str(standby))
    check = check_standby(store, "s", fs, b.snapshot_id)
    assert not check.usable and "did not finish" in (check.reason or "")
    with pytest.raises(UnsupportedCheckpointError, match="updating"):
        refuse_unfinished_restore(fs)

    up = update_standby(store, "s", standby)
    assert up.files_written < up.files  # the files the crashed update had kept are known still
    assert check_standby(store, "s", fs, b.snapshot_id).usable
    assert [p.name for p in (standby / "_streamstate" / "standby-files").iterdir()] == [
        read_standby(fs).files]  # type: ignore[union-attr]  # the crashed update's lists are gone


@pytest.mark.parametrize("verify", ["checksums", "full"])
def test_a_file_changed_by_hand_with_its_mtime_put_back_fails_verification_naming_it(
    tmp_path: Path, store: LocalStore, verify: str
) -> None:
    root = checkpoint_at(tmp_path / "ck")
    sid = create_snapshot(str(root), store, "s").manifest.snapshot_id
    standby = tmp_path / "standby"
    update_standby(store, "s", standby)
    victim = standby / "state/0/1/2.delta"
    st = victim.stat()
    data = bytearray(victim.read_bytes())
    data[5] ^= 0x01  # same size, one bit
    victim.write_bytes(bytes(data))
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))

    check = check_standby(store, "s", open_checkpoint_fs(str(standby)), sid, verify=verify)
    assert not check.usable
    assert check.reason is not None and check.reason.startswith("verification failed: state/0/1/2.delta: read ")

    repaired = update_standby(store, "s", standby)  # the next update writes that file again, only it
    assert repaired.files_written == 1 and repaired.previous_snapshot_id == sid
    assert check_standby(store, "s", open_checkpoint_fs(str(standby)), sid, verify=verify).usable


@pytest.mark.parametrize("damage", ["missing", "extra", "record"])
def test_a_missing_or_unexpected_file_or_a_changed_file_list_fails_verification(
    tmp_path: Path, store: LocalStore, damage: str
) -> None:
    sid = create_snapshot(str(checkpoint_at(tmp_path / "ck")), store, "s").manifest.snapshot_id
    standby = tmp_path / "standby"
    update_standby(store, "s", standby)
    if damage == "missing":
        (standby / "commits/1").unlink()
    elif damage == "extra":
        write(standby / "offsets/3", "v1\n{}\n{}")
    else:
        [listing] = (standby / "_streamstate" / "standby-files").iterdir()
        listing.write_bytes(listing.read_bytes() + b"\0")
    reason = check_standby(store, "s", open_checkpoint_fs(str(standby)), sid).reason or ""
    expected = {"missing": "commits/1 is missing", "extra": "offsets/3 is not part of the snapshot",
                "record": "is missing or not the one the record names"}[damage]
    assert expected in reason


def test_a_promoted_standby_is_a_checkpoint_with_dr_offsets_and_is_never_updated_again(
    tmp_path: Path, store: LocalStore
) -> None:
    root = checkpoint_at(tmp_path / "ck")
    manifest = create_snapshot(str(root), store, "s").manifest
    standby = tmp_path / "standby"
    update_standby(store, "s", standby)
    fs = open_checkpoint_fs(str(standby))
    rewrite = DrRewrite(translation())
    rewritten = rewritten_files(store, manifest.files, rewrite)
    assert check_standby(store, "s", fs, manifest.snapshot_id, skip=frozenset(rewritten)).usable
    promoted = promote_standby(store, manifest, fs, rewritten)
    assert [r for r in promoted.rewritten if not r.endswith(".crc")] == ["offsets/0", "offsets/1", "offsets/2",
                                                                           "sources/0/0"]

    restore_snapshot(store, "s", manifest.snapshot_id, tmp_path / "restored", fsync=False, rewrite=rewrite)
    assert data_files(standby) == data_files(tmp_path / "restored")  # what a restore for DR writes
    assert json.loads((standby / "offsets/2").read_text().split("\n")[2]) == {"primary.tx": {"0": 27, "1": 51}}
    record = read_standby(fs)
    assert record is not None and (record.status, record.promoted_via, record.files) == ("promoted", "standby", None)
    assert not (standby / "_streamstate" / "standby-files").exists() or not any(
        (standby / "_streamstate" / "standby-files").iterdir())
    refuse_unfinished_restore(fs)  # the launcher starts it now
    assert json.loads((standby / "_streamstate/lineage.json").read_text())["snapshot_id"] == manifest.snapshot_id
    with pytest.raises(UsageError, match="was promoted .* it is the stream's checkpoint now"):
        update_standby(store, "s", standby)


def test_a_location_that_is_no_standby_or_runs_a_stream_is_never_updated(tmp_path: Path, store: LocalStore) -> None:
    create_snapshot(str(checkpoint_at(tmp_path / "ck")), store, "s")
    other = checkpoint_at(tmp_path / "other", batches=2)
    before = data_files(other)
    with pytest.raises(UsageError, match="is not a standby and not empty"):
        update_standby(store, "s", other)
    assert data_files(other) == before

    standby = tmp_path / "standby"
    update_standby(store, "s", standby)
    write_heartbeat(str(standby), Heartbeat("q", "r", "n", "elsewhere", 1, "running", 3, 0, now_iso()))
    with pytest.raises(StreamRunningError, match="cannot update the standby"):
        update_standby(store, "s", standby)


# --- the faces: CLI, operator, report ------------------------------------------------------


def test_replicate_with_a_standby_keeps_it_holding_the_destination_s_newest_snapshot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from airflow_provider_streamstate.cli import main

    root = checkpoint_at(tmp_path / "ck")
    sid = create_snapshot(str(root), LocalStore(tmp_path / "src", fsync=False), "s").manifest.snapshot_id
    args = ["replicate", "--from", str(tmp_path / "src"), "--to", str(tmp_path / "dst"), "--stream", "s",
            "--standby", str(tmp_path / "standby"), "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["snapshots_published"] == 1
    assert out["standby"]["snapshot_id"] == sid and out["standby"]["files_written"] == out["standby"]["files"]
    assert main(args[:-1]) == 0
    assert capsys.readouterr().out.strip().endswith(f"standby {tmp_path / 'standby'} holds {sid} (batch 2) already")

    write(tmp_path / "not-a-standby" / "keep", "x")
    assert main([*args[:-3], "--standby", str(tmp_path / "not-a-standby")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not a standby and not empty" in err[0]


@pytest.mark.parametrize(("extra", "words"), [
    ([], "failover needs --target or --standby"),
    (["--standby", "A", "--target", "B"], "is not the standby"),
    (["--standby", "PROMOTED"], "was promoted"),
    (["--standby", "OTHER"], "is not a standby and not empty"),
])
def test_failover_refuses_a_standby_it_cannot_promote_in_one_line_before_reaching_kafka(
    tmp_path: Path, store: LocalStore, capsys: pytest.CaptureFixture[str], extra: list[str], words: str
) -> None:
    from airflow_provider_streamstate.cli import main

    manifest = create_snapshot(str(checkpoint_at(tmp_path / "ck")), store, "s").manifest
    promoted = tmp_path / "promoted"
    update_standby(store, "s", promoted)
    fs = open_checkpoint_fs(str(promoted))
    promote_standby(store, manifest, fs, rewritten_files(store, manifest.files, DrRewrite(translation())))
    checkpoint_at(tmp_path / "other")
    names = {"A": str(tmp_path / "a"), "B": str(tmp_path / "b"), "PROMOTED": str(promoted),
             "OTHER": str(tmp_path / "other")}
    code = main(["failover", "--store", str(tmp_path / "store"), "--stream", "s", "--kafka-bootstrap", "127.0.0.1:1",
                 *[names.get(x, x) for x in extra]])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and words in err[0], err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_the_replicate_operator_keeps_each_stream_s_standby_and_bad_input_fails_it_without_retry(
    tmp_path: Path
) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    from airflow_provider_streamstate.operators.replicate import ReplicateSnapshotsOperator
    from airflow_provider_streamstate.spec import StreamSpec

    root = checkpoint_at(tmp_path / "ck")
    sid = create_snapshot(str(root), LocalStore(tmp_path / "src", fsync=False), "orders").manifest.snapshot_id
    spec = StreamSpec(name="orders", checkpoint=str(root), store=f"file://{tmp_path / 'src'}")
    op = ReplicateSnapshotsOperator(task_id="r", stream=spec, destination_store=f"file://{tmp_path / 'dst'}",
                                    standby=str(tmp_path / "standby" / "{stream}"), parallelism=2)
    out = op.execute({})
    assert out["standby"]["snapshot_id"] == sid and out["standby"]["location"] == str(tmp_path / "standby/orders")
    assert op.execute({})["standby"]["unchanged"] is True
    bad = ReplicateSnapshotsOperator(task_id="r", stream=spec, destination_store=f"file://{tmp_path / 'dst'}",
                                     standby=str(root))
    with pytest.raises(AirflowFailException, match="is not a standby and not empty"):
        bad.execute({})


def test_the_failover_report_says_whether_the_standby_was_promoted_or_why_not(tmp_path: Path) -> None:
    from datetime import UTC, datetime, timedelta

    from airflow_provider_streamstate.engine.dr.report import failover_report

    start = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)
    (tmp_path / "ckpt" / "commits").mkdir(parents=True)
    base = {"stream": "orders", "snapshot_id": "s7", "batch_id": 7, "events_behind": 0, "seconds_choose": 0.5,
            "seconds_restore": 0.0, "seconds_rewrite": 0.01, "seconds_verify_standby": 0.2}
    used = {"location": "/dr/orders", "used": True, "reason": None, "files": 40, "files_read": 0}
    stale = {**used, "used": False, "reason": "stale: it holds s5 (batch 5), the failover chose s7"}
    for standby, line in ((used, "warm standby /dr/orders: promoted, 40 files verified, 0 read"),
                          (stale, "warm standby /dr/orders: not used (stale: it holds s5 (batch 5), the failover "
                                  "chose s7); restored over it")):
        out = failover_report(start, {"checkpoint": str(tmp_path / "ckpt")}, {"outcome": "not-running"},
                              {**base, "standby": standby}, {"started_at": (start + timedelta(seconds=5)).isoformat()},
                              {"total_lag": 0}, now=start + timedelta(seconds=20))
        assert out["lines"][-1] == line and out["standby"]["used"] is standby["used"]
        assert out["rto_parts"]["verify_standby_s"] == 0.2


def test_a_promotion_that_crashed_is_refused_by_the_launcher_and_updates_and_finished_by_a_failover_run_again(
    tmp_path: Path, store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest = create_snapshot(str(checkpoint_at(tmp_path / "ck")), store, "s").manifest
    standby = tmp_path / "standby"
    update_standby(store, "s", standby)
    fs = open_checkpoint_fs(str(standby))
    rewritten = rewritten_files(store, manifest.files, DrRewrite(translation()))
    real = type(fs).write_record

    def crash_at_the_second_offsets_file(self, rel, data, **kw):  # noqa: ANN001, ANN202
        if rel == "offsets/1":
            raise KeyboardInterrupt("power cut")
        return real(self, rel, data, **kw)

    monkeypatch.setattr(type(fs), "write_record", crash_at_the_second_offsets_file)
    with pytest.raises(KeyboardInterrupt):
        promote_standby(store, manifest, fs, rewritten)
    monkeypatch.setattr(type(fs), "write_record", real)
    assert read_standby(fs).status == "promoting"  # type: ignore[union-attr]
    with pytest.raises(UnsupportedCheckpointError, match="promoting"):
        refuse_unfinished_restore(fs)
    with pytest.raises(UsageError, match="was promoting the standby .* did not finish"):
        update_standby(store, "s", standby)

    check = check_standby(store, "s", fs, manifest.snapshot_id, skip=frozenset(rewritten))
    assert check.usable and check.files_read == 0
    promote_standby(store, manifest, fs, rewritten)
    restore_snapshot(store, "s", manifest.snapshot_id, tmp_path / "restored", fsync=False,
                     rewrite=DrRewrite(translation()))
    assert data_files(standby) == data_files(tmp_path / "restored")
    refuse_unfinished_restore(fs)
