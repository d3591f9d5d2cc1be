"""History stays unambiguous after a rollback: restoring an older snapshot into a stream's
checkpoint starts a new timeline, `latest` means newest on the current timeline, and
snapshots of the abandoned future are marked, never mistaken for the present."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.catalog.snapshots import (
    latest_snapshot,
    list_snapshots,
    resolve_snapshot,
)
from airflow_provider_streamstate.engine.catalog.timeline import read_lineage
from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from tests.unit.fake_checkpoint import HDFS, PROVIDER_CONF, make_checkpoint, store_dirs, write


def grow(root: Path, upto: int) -> None:
    """Make batches 0..upto committed, with the HDFS deltas their state versions need."""
    for b in range(upto + 1):
        if not (root / f"commits/{b}").exists():
            meta = {"batchWatermarkMs": 1000 * b, "batchTimestampMs": 5000 + b, "conf": {PROVIDER_CONF: HDFS}}
            write(root / f"offsets/{b}", f"v1\n{json.dumps(meta)}\n" + json.dumps({"tx": {"0": 10 * (b + 1)}}))
            write(root / f"commits/{b}", "v1\n" + json.dumps({"nextBatchWatermarkMs": 1000 * (b + 1)}))
        for d in store_dirs(root):
            if not (d / f"{b + 1}.delta").exists():
                write(d / f"{b + 1}.delta", f"state of version {b + 1} in {d.name}")


@pytest.fixture
def history(tmp_path: Path):  # noqa: ANN201
    """Stream `s` snapshotted at batches 5, 9 and 13 on its first timeline."""
    ckpt = make_checkpoint(tmp_path / "ckpt", batches=1)
    store = LocalStore(tmp_path / "store", fsync=False)
    ids = {}
    for b in (5, 9, 13):
        grow(ckpt, b)
        ids[b] = create_snapshot(str(ckpt), store, "s").manifest.snapshot_id
    return ckpt, store, ids


def test_a_rollback_starts_a_new_timeline_and_latest_follows_it(history) -> None:
    ckpt, store, ids = history
    assert resolve_snapshot(store, "s", "latest").snapshot_id == ids[13]

    restored = restore_snapshot(store, "s", ids[5], ckpt, force=True, fsync=False)
    assert (restored.timeline, restored.branched) == (2, True)
    lineage = read_lineage(ckpt)
    assert lineage is not None and (lineage.stream, lineage.timeline, lineage.snapshot_id) == ("s", 2, ids[5])
    # Before the rewound stream is snapshotted, the present is the snapshot it was rewound to.
    assert resolve_snapshot(store, "s", "latest").snapshot_id == ids[5]

    assert not (ckpt / "commits/6").exists()  # the cut left out everything after batch 5
    grow(ckpt, 9)  # the rewound stream re-runs batches 6..9
    s9 = create_snapshot(str(ckpt), store, "s").manifest
    grow(ckpt, 11)
    s11 = create_snapshot(str(ckpt), store, "s").manifest

    assert (s9.timeline, s9.parent) == (2, ids[5])  # its true parent, not the abandoned batch 9
    assert s9.snapshot_id.endswith("Z-t2") and (s11.timeline, s11.parent) == (2, s9.snapshot_id)
    assert resolve_snapshot(store, "s", "latest").snapshot_id == s11.snapshot_id
    assert latest_snapshot(store, "s", timeline=1).snapshot_id == ids[13]  # the old line is still there

    listing = list_snapshots(store, "s")
    on_current = {m.snapshot_id: listing.on_current_timeline(m) for m in listing.manifests}
    assert on_current == {ids[5]: True, ids[9]: False, ids[13]: False, s9.snapshot_id: True, s11.snapshot_id: True}
    # Oldest first, by creation time: the abandoned snapshots are listed before the new ones.
    assert [m.snapshot_id for m in listing.manifests] == [ids[5], ids[9], ids[13], s9.snapshot_id, s11.snapshot_id]


def test_restoring_the_newest_snapshot_continues_the_timeline(history, tmp_path) -> None:
    _, store, ids = history
    r = restore_snapshot(store, "s", "latest", tmp_path / "dr", fsync=False)
    assert (r.manifest.snapshot_id, r.timeline, r.branched) == (ids[13], 1, False)
    assert store.list_records("streams/s/timelines/") == []


def test_a_clone_is_a_new_stream_not_a_new_timeline(history, tmp_path) -> None:
    _, store, ids = history
    clone = tmp_path / "clone"
    r = restore_snapshot(store, "s", ids[5], clone, new_query_id=True, fsync=False)
    assert (r.timeline, r.branched) == (None, False)
    assert store.list_records("streams/s/timelines/") == []
    assert create_snapshot(str(clone), store, "s-clone").manifest.timeline == 1
    # The clone's query is not the stream's: mixing it into the stream's history is refused.
    with pytest.raises(UsageError, match="another query") as refused:
        create_snapshot(str(clone), store, "s")
    assert "--new-timeline" in refused.value.one_line()
    started = create_snapshot(str(clone), store, "s", new_timeline=True).manifest
    assert started.timeline == 2 and started.parent is None
    assert resolve_snapshot(store, "s", "latest").snapshot_id == started.snapshot_id


def test_a_failed_rollback_starts_no_timeline(history, monkeypatch) -> None:
    ckpt, store, ids = history
    from airflow_provider_streamstate.backends.local import checkpoint as restore_mod

    def boom(*_a: object, **_k: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(restore_mod, "_exchange", boom)
    with pytest.raises(OSError):
        restore_snapshot(store, "s", ids[5], ckpt, force=True, fsync=False)
    assert store.list_records("streams/s/timelines/") == []
    assert resolve_snapshot(store, "s", "latest").snapshot_id == ids[13]


def test_a_rollback_interrupted_before_its_timeline_was_recorded_is_finished_by_the_next_snapshot(
    history, monkeypatch
) -> None:
    ckpt, store, ids = history
    from airflow_provider_streamstate.engine.catalog import timeline as timeline_mod

    real = timeline_mod.Lineage.branch
    monkeypatch.setattr(timeline_mod.Lineage, "branch", lambda self, store: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        restore_snapshot(store, "s", ids[5], ckpt, force=True, fsync=False)
    lineage = read_lineage(ckpt)
    assert lineage is not None and lineage.timeline is None  # swapped in, timeline not yet recorded
    monkeypatch.setattr(timeline_mod.Lineage, "branch", real)
    again = create_snapshot(str(ckpt), store, "s").manifest
    assert (again.timeline, again.batch_id, again.parent) == (2, 5, ids[5])
    assert len(store.list_records("streams/s/timelines/")) == 1
    assert create_snapshot(str(ckpt), store, "s").reused  # and it stays on that timeline


def test_the_cli_says_a_rollback_started_a_timeline_and_lists_the_abandoned_snapshots_as_such(
    history, capsys
) -> None:
    """What a person and a script see after the rollback runbook: the restore says which
    timeline the stream continues on; `snapshot list` marks the abandoned snapshots with `x`
    and a footer, and `--json` gives each one's timeline, parent and current-timeline flag."""
    from airflow_provider_streamstate.cli import main

    ckpt, store, ids = history
    assert main(["restore", "--store", store.url, "--stream", "s", ids[5], "--target", str(ckpt), "--force"]) == 0
    assert "rollback: stream s continues on new timeline 2" in capsys.readouterr().out
    grow(ckpt, 7)
    s7 = create_snapshot(str(ckpt), store, "s").manifest

    assert main(["snapshot", "list", "--store", store.url, "--stream", "s", "--json"]) == 0
    rows = {r["snapshot_id"]: r for r in json.loads(capsys.readouterr().out)}
    assert {sid: (r["timeline"], r["parent"], r["on_current_timeline"]) for sid, r in rows.items()} == {
        ids[5]: (1, None, True),
        ids[9]: (1, ids[5], False),
        ids[13]: (1, ids[9], False),
        s7.snapshot_id: (2, ids[5], True),
    }

    assert main(["snapshot", "list", "--store", store.url, "--stream", "s"]) == 0
    text = capsys.readouterr().out
    marks = {line[2:].split()[0]: line[0] for line in text.splitlines()[1:] if line[2:].startswith(tuple(rows))}
    assert marks == {ids[5]: " ", ids[9]: "x", ids[13]: "x", s7.snapshot_id: " "}
    assert "x: 2 snapshot(s) of an abandoned timeline" in text and "the current timeline is 2" in text
    assert main(["snapshot", "show", "--store", store.url, "--stream", "s", "latest", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["snapshot_id"] == s7.snapshot_id
