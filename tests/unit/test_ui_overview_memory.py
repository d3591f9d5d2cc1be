"""What the Streams pages' API server keeps between requests saves work, never truth: a page
viewed again parses no index segment and reads no manifest, yet shows snapshots published,
replicated, validated, pinned, cloned or deleted since, and the row's newest snapshot is the
one `latest` resolves."""

from __future__ import annotations

from pathlib import Path

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.catalog.retention import delete_snapshots, pin_snapshot
from airflow_provider_streamstate.engine.catalog.snapshots import resolve_snapshot
from airflow_provider_streamstate.engine.lifecycle.replicate import replicate
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.overview.history import (
    history_of,
    read_catalog,
    stream_history,
    summaries,
)
from airflow_provider_streamstate.engine.overview.streams import stream_row
from airflow_provider_streamstate.engine.streams.clones import record_clone
from tests.unit.store_history import put_validation
from tests.unit.test_timelines import grow
from tests.unit.test_ui_overview import rolled_back_history


class ReadCountingStore(LocalStore):
    """A local store that counts the index segments and manifests it is asked for."""

    segments_read = 0
    manifests_read = 0

    def get_record(self, key: str) -> bytes | None:
        if "/index/" in key:
            self.segments_read += 1
        return super().get_record(key)

    def get_manifest(self, stream: str, snapshot_id: str) -> bytes:
        self.manifests_read += 1
        return super().get_manifest(stream, snapshot_id)


def test_a_page_viewed_again_parses_no_segment_and_reads_no_manifest(tmp_path: Path) -> None:
    _, built, _, ids = rolled_back_history(tmp_path)
    store = ReadCountingStore(built.root, fsync=False)
    first = stream_history(store, "s")
    store.segments_read = store.manifests_read = 0
    again = stream_history(store, "s")
    assert (store.segments_read, store.manifests_read) == (0, 0)
    assert again == first and sorted(s.snapshot_id for s in again.snapshots) == sorted(ids.values())


def test_snapshots_published_or_deleted_since_the_last_view_are_shown(tmp_path: Path) -> None:
    ckpt, store, dr, ids = rolled_back_history(tmp_path)
    stream_row(store, "s", dr_store=dr)
    grow(ckpt, 12)
    newer = create_snapshot(str(ckpt), store, "s").manifest.snapshot_id
    delete_snapshots(store, "s", [ids[13]])
    shown = [s.snapshot_id for s in stream_history(store, "s").snapshots]
    assert newer in shown and ids[13] not in shown
    row = stream_row(store, "s", dr_store=dr)
    assert row.newest is not None and row.newest.snapshot_id == newer == resolve_snapshot(store, "s", "latest").snapshot_id


def test_the_newest_and_newest_known_good_are_latests_on_the_current_timeline(tmp_path: Path) -> None:
    _, store, dr, ids = rolled_back_history(tmp_path)
    catalog = read_catalog(store, "s", dr_store=dr)
    newest, good = catalog.newest(), catalog.newest(good=True)
    assert newest is not None and newest.snapshot_id == resolve_snapshot(store, "s", "latest").snapshot_id == ids["11'"]
    assert good is not None and good.snapshot_id == resolve_snapshot(store, "s", "latest-good:shape").snapshot_id
    assert [s.snapshot_id for s in catalog.current_line] == [ids[5], ids["9'"], ids["11'"]]


def test_a_store_without_an_index_read_again_after_new_replicas_reads_each_manifest_once(tmp_path: Path) -> None:
    _, store, built_dr, ids = rolled_back_history(tmp_path)
    dr = ReadCountingStore(built_dr.root, fsync=False)  # replication copies manifests, not index segments
    assert summaries(dr, "s").manifests_read == 2
    replicate(store, dr, "s", snapshots=[ids["11'"]])
    dr.manifests_read = 0
    assert summaries(dr, "s").manifests_read == 1  # the new replica only
    dr.manifests_read = dr.segments_read = 0
    third = summaries(dr, "s")
    assert (third.manifests_read, dr.manifests_read) == (0, 0)
    assert [s.snapshot_id for s in third.snapshots] == [ids[5], ids["9'"], ids["11'"]]
    assert dr.list_records("streams/s/index/") == []  # remembered in memory, never written


def test_a_history_viewed_again_shows_what_was_validated_pinned_cloned_or_replicated_since(tmp_path: Path) -> None:
    _, store, dr, ids = rolled_back_history(tmp_path)
    first = stream_history(store, "s", dr_store=dr)
    assert stream_history(store, "s", dr_store=dr) is first  # nothing changed: drawn once

    def entry(sid: str):  # noqa: ANN202
        return next(e for e in stream_history(store, "s", dr_store=dr).snapshots if e.snapshot_id == sid)
    put_validation(store, "s", ids[9], "shape", False)
    assert entry(ids[9]).failed
    pin_snapshot(store, "s", ids[13], reason="keep")
    assert entry(ids[13]).pinned
    record_clone(store, clone="s-other", source_stream="s", checkpoint=str(tmp_path / "other"),
                 snapshot_id=ids[13], expires_at="2099-01-01T00:00:00Z", sinks={})
    assert entry(ids[13]).clones == ["s-other"]
    replicate(store, dr, "s", snapshots=[ids["11'"]])
    assert entry(ids["11'"]).in_dr


def test_a_history_worked_out_again_in_part_after_a_change_is_the_history_worked_out_whole(tmp_path: Path) -> None:
    _, store, dr, ids = rolled_back_history(tmp_path)
    kept = stream_history(store, "s", dr_store=dr)
    changes = [
        lambda: put_validation(store, "s", ids[13], "shape", False),
        lambda: put_validation(store, "s", ids[5], "other", False),
        lambda: pin_snapshot(store, "s", ids["9'"], reason="keep"),
        lambda: record_clone(store, clone="s-other", source_stream="s", checkpoint=str(tmp_path / "other"),
                             snapshot_id=ids[13], expires_at="2099-01-01T00:00:00Z", sinks={}),
        lambda: replicate(store, dr, "s", snapshots=[ids["11'"]]),
    ]
    for change in changes:
        change()
        again = stream_history(store, "s", dr_store=dr)
        assert again == history_of(read_catalog(store, "s", dr_store=dr))
        same = [a is b for a, b in zip(kept.snapshots, again.snapshots, strict=True)]
        assert 1 <= same.count(False) <= 2 and again != kept  # the entries of what changed, only
        kept = again
    assert stream_history(store, "s") == history_of(read_catalog(store, "s"))  # without the DR store: every entry
