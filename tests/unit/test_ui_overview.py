"""The Streams pages' read model (engine/overview) tells the truth about a stream's history:
after a rollback its snapshots sit on two timelines with the current one marked, a failed
validation shows as failed and never as known-good, the newest known-good snapshot is the
newest that passed, the DR store's copies and lag are counted from its listing, clones and
pins show on the snapshot they were taken from, and reading writes nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.catalog.index import list_summaries
from airflow_provider_streamstate.engine.catalog.retention import pin_snapshot
from airflow_provider_streamstate.engine.core.errors import NotFoundError
from airflow_provider_streamstate.engine.lifecycle.replicate import replicate
from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.overview.history import stream_history, summaries
from airflow_provider_streamstate.engine.overview.snapshot import snapshot_detail
from airflow_provider_streamstate.engine.overview.streams import kafka_lag, stream_row, stream_state
from airflow_provider_streamstate.engine.streams.clones import record_clone
from tests.unit.fake_checkpoint import make_checkpoint
from tests.unit.store_history import put_validation
from tests.unit.test_timelines import grow


def rolled_back_history(tmp_path: Path) -> tuple[Path, LocalStore, LocalStore, dict]:
    """Stream `s`: snapshots of batches 5, 9, 13 on timeline 1, rolled back to 5, then 9' and
    11' on timeline 2; 9' failed suite `shape`, 5 and 11' passed it; 5 is pinned; only 5 and
    9' were replicated to DR; a clone was taken from 9'. (Also the plugin tests' history.)"""
    ckpt = make_checkpoint(tmp_path / "ckpt", batches=1)
    store = LocalStore(tmp_path / "store", fsync=False)
    dr = LocalStore(tmp_path / "dr", fsync=False)
    ids = {}
    for b in (5, 9, 13):
        grow(ckpt, b)
        ids[b] = create_snapshot(str(ckpt), store, "s").manifest.snapshot_id
    restore_snapshot(store, "s", ids[5], ckpt, force=True, fsync=False)
    for b in (9, 11):
        grow(ckpt, b)
        ids[f"{b}'"] = create_snapshot(str(ckpt), store, "s").manifest.snapshot_id
    put_validation(store, "s", ids[5], "shape", True)
    put_validation(store, "s", ids["9'"], "shape", False)
    put_validation(store, "s", ids["11'"], "shape", True)
    pin_snapshot(store, "s", ids[5], reason="audit")
    replicate(store, dr, "s", snapshots=[ids[5], ids["9'"]])
    record_clone(store, clone="s-sandbox", source_stream="s", checkpoint=str(tmp_path / "clone"),
                 snapshot_id=ids["9'"], expires_at="2099-01-01T00:00:00Z", sinks={})
    list_summaries(store, "s")  # the index, as `snapshot list` or retention leave it
    return ckpt, store, dr, ids


@pytest.fixture
def rolled_back(tmp_path: Path):  # noqa: ANN201
    return rolled_back_history(tmp_path)


def test_history_after_a_rollback_has_two_timelines_with_the_second_current(rolled_back) -> None:
    _, store, dr, ids = rolled_back
    h = stream_history(store, "s", dr_store=dr)
    assert [(t.timeline, t.parent_timeline, t.branch_snapshot, t.current) for t in h.timelines] == [
        (1, None, None, False), (2, 1, ids[5], True)]
    by_id = {e.snapshot_id: e for e in h.snapshots}
    assert {sid for sid, e in by_id.items() if not e.on_current_timeline} == {ids[9], ids[13]}
    assert by_id[ids["9'"]].parent == ids[5] and by_id[ids["9'"]].timeline == 2


def test_a_failed_validation_shows_failed_and_is_not_known_good(rolled_back) -> None:
    _, store, dr, ids = rolled_back
    by_id = {e.snapshot_id: e for e in stream_history(store, "s", dr_store=dr).snapshots}
    failed = by_id[ids["9'"]]
    assert (failed.validations, failed.failed, failed.known_good) == ({"shape": False}, True, False)
    assert by_id[ids["11'"]].known_good and not by_id[ids[13]].validations

    page = snapshot_detail(store, "s", ids["9'"], dr_store=dr)
    assert [(v.suite, v.success) for v in page.validations] == [("shape", False)]
    assert page.validations[0].failed == ["expect_column_values_to_not_be_null(key) observed null"]
    assert not page.known_good


def test_the_row_shows_newest_and_newest_known_good_on_the_current_timeline(rolled_back) -> None:
    ckpt, store, dr, ids = rolled_back
    put_validation(store, "s", ids[13], "shape", True)  # known-good, but abandoned by the rollback
    row = stream_row(store, "s", checkpoint=str(ckpt), dr_store=dr)
    assert row.newest is not None and row.newest.snapshot_id == ids["11'"]
    assert row.newest_known_good is not None and row.newest_known_good.snapshot_id == ids["11'"]
    assert row.current_timeline == 2
    assert (row.state.state, row.state.last_batch) == ("absent", 11)
    r = row.retention
    assert r is not None
    assert (r.snapshots, r.on_current_timeline, r.abandoned, r.pinned, r.known_good) == (5, 3, 2, 1, 3)


def test_dr_presence_and_lag_come_from_the_dr_listing(rolled_back) -> None:
    ckpt, store, dr, ids = rolled_back
    h = stream_history(store, "s", dr_store=dr)
    assert {e.snapshot_id for e in h.snapshots if e.in_dr} == {ids[5], ids["9'"]}
    lag = stream_row(store, "s", checkpoint=str(ckpt), dr_store=dr).dr
    assert lag is not None and lag.newest_in_dr is not None
    assert (lag.snapshots_behind, lag.newest_in_dr.snapshot_id) == (1, ids["9'"])
    replicate(store, dr, "s", snapshots=[ids["11'"]])
    caught_up = stream_row(store, "s", checkpoint=str(ckpt), dr_store=dr).dr
    assert caught_up is not None and (caught_up.snapshots_behind, caught_up.message) == (0, "up to date")
    assert stream_history(store, "s").snapshots[0].in_dr is None  # no DR store: not known, not "absent"


def test_clones_and_pins_show_on_their_snapshot(rolled_back) -> None:
    _, store, dr, ids = rolled_back
    by_id = {e.snapshot_id: e for e in stream_history(store, "s", dr_store=dr).snapshots}
    assert by_id[ids["9'"]].clones == ["s-sandbox"] and by_id[ids[5]].clones == []
    assert [sid for sid, e in by_id.items() if e.pinned] == [ids[5]]
    page = snapshot_detail(store, "s", ids[5], dr_store=dr)
    assert page.pinned and page.in_dr and page.clones == []
    assert snapshot_detail(store, "s", ids["9'"], dr_store=dr).clones == ["s-sandbox"]


def test_the_snapshot_page_summarises_its_manifest(rolled_back) -> None:
    _, store, _, ids = rolled_back
    page = snapshot_detail(store, "s", ids["11'"])
    assert (page.batch_id, page.timeline, page.parent, page.on_current_timeline) == (11, 2, ids["9'"], True)
    assert page.kafka_offsets == {"tx": {"0": 120}}
    assert page.watermark_ms == 11000 and page.files > 0 and page.bytes_total > 0
    assert [o["name"] for o in page.operators] == ["stateStoreSave"]
    with pytest.raises(NotFoundError):
        snapshot_detail(store, "s", "000000000011-20260101T000000000000Z-t2")


def test_reading_writes_nothing_even_when_the_index_is_cold(rolled_back, tmp_path: Path) -> None:
    ckpt, store, dr, ids = rolled_back
    grow(ckpt, 12)
    create_snapshot(str(ckpt), store, "s")  # not in the index yet
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    row = stream_row(store, "s", checkpoint=str(ckpt), dr_store=dr)
    stream_history(store, "s", dr_store=dr)
    snapshot_detail(store, "s", ids[5], dr_store=dr)
    assert row.newest is not None and row.newest.batch_id == 12
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_a_store_without_an_index_is_read_from_its_manifests_once_per_process(rolled_back, tmp_path: Path) -> None:
    _, store, dr, ids = rolled_back
    replicate(store, dr, "s", snapshots=[ids["11'"]])
    put_validation(dr, "s", ids["11'"], "shape", True)
    first = summaries(dr, "s")  # replication copies manifests, not index segments
    again = summaries(dr, "s")
    assert (first.manifests_read, again.manifests_read) == (len(first.snapshots), 0)
    assert [s.snapshot_id for s in again.snapshots] == [s.snapshot_id for s in first.snapshots]
    assert again.validations == first.validations and again.validations[ids["11'"]] == {"shape": True}
    assert dr.list_records("streams/s/index/") == []  # remembered in memory, never written


def test_an_unknown_stream_is_an_empty_row_and_an_unreadable_checkpoint_says_why(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    row = stream_row(store, "nothing", checkpoint=str(tmp_path / "none"))
    assert (row.newest, row.state.state, row.problems) == (None, "absent", [])
    assert row.retention is not None and row.retention.snapshots == 0
    assert stream_state(None).state == "unknown"


def test_kafka_lag_is_skipped_with_a_reason_when_it_cannot_be_measured(rolled_back) -> None:
    ckpt, *_ = rolled_back
    assert "no Kafka connection" in kafka_lag(str(ckpt), None).message

    def unreachable(offsets: dict[str, dict[str, int]]) -> list:  # noqa: ARG001
        from airflow_provider_streamstate.engine.core.errors import TransientError

        raise TransientError("cannot reach Kafka at 127.0.0.1:1", hint="check the brokers")

    lag = kafka_lag(str(ckpt), unreachable)
    assert not lag.available and "cannot reach Kafka at 127.0.0.1:1" in lag.message


def test_ages_are_measured_from_now(rolled_back) -> None:
    _, store, _, ids = rolled_back
    later = datetime.now(UTC) + timedelta(hours=2)
    page = snapshot_detail(store, "s", ids[5], now=later)
    assert 7100 < page.age_s < 7300
