"""Retention keeps exactly what its policy says, on creation time and timeline (not id
order): the newest N and everything younger than max age on the current timeline, the
newest of each hour/day for older history, pins (record or label), the newest known-good
snapshot per suite, abandoned timelines only for their own shorter age; it deletes
manifests as tombstones with their validation records, and a dry run deletes nothing."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.catalog.retention import (
    RetentionPolicy,
    apply_retention,
    pin_snapshot,
    unpin_snapshot,
)
from airflow_provider_streamstate.engine.catalog.timeline import new_timeline
from airflow_provider_streamstate.engine.core.config.values import parse_duration
from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.engine.core.manifest import SnapshotRef
from airflow_provider_streamstate.engine.stores.base import tombstone_key
from tests.unit.store_history import at, put_snapshot, put_validation

NOW = at("2026-11-20T12:00").timestamp()
POLICY = RetentionPolicy(keep_last=2, max_age_s=3600, keep_hourly_s=6 * 3600, keep_daily_s=7 * 86400,
                         abandoned_max_age_s=4.5 * 3600)


def _history(store: LocalStore) -> dict[str, str]:
    """Two timelines: timeline 1 (A..F, then G, I, H abandoned after F), timeline 2 from F."""
    s = "orders"
    ids = {}
    ids["A"] = put_snapshot(store, s, 0, at("2026-10-21T12:00")).snapshot_id
    ids["B"] = put_snapshot(store, s, 1, at("2026-11-10T12:00")).snapshot_id
    ids["C"] = put_snapshot(store, s, 2, at("2026-11-17T10:00")).snapshot_id
    ids["D"] = put_snapshot(store, s, 3, at("2026-11-17T20:00")).snapshot_id
    ids["E"] = put_snapshot(store, s, 4, at("2026-11-19T09:00")).snapshot_id
    ids["F"] = put_snapshot(store, s, 5, at("2026-11-20T06:00"), labels={"pin": "true"}).snapshot_id
    ids["G"] = put_snapshot(store, s, 6, at("2026-11-20T07:00")).snapshot_id
    ids["I"] = put_snapshot(store, s, 7, at("2026-11-20T07:15")).snapshot_id
    ids["H"] = put_snapshot(store, s, 8, at("2026-11-20T08:00")).snapshot_id
    new_timeline(store, s, branch_from=SnapshotRef.parse(ids["F"]), reason="rollback to F")
    ids["J"] = put_snapshot(store, s, 6, at("2026-11-20T09:10"), timeline=2).snapshot_id
    ids["K"] = put_snapshot(store, s, 7, at("2026-11-20T09:40"), timeline=2).snapshot_id
    ids["L"] = put_snapshot(store, s, 8, at("2026-11-20T11:20"), timeline=2).snapshot_id
    ids["M"] = put_snapshot(store, s, 9, at("2026-11-20T11:50"), timeline=2).snapshot_id
    assert pin_snapshot(store, s, ids["B"], reason="audit")
    put_validation(store, s, ids["A"], "shape", True)
    put_validation(store, s, ids["E"], "shape", True)
    put_validation(store, s, ids["C"], "totals", False)
    put_validation(store, s, ids["G"], "totals", True)  # only on the abandoned timeline
    return ids


def _names(ids: dict[str, str], verdicts) -> set[str]:
    by_id = {v: k for k, v in ids.items()}
    return {by_id[v.snapshot_id] for v in verdicts}


def test_retention_keeps_exactly_what_the_policy_says(tmp_path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    ids = _history(store)
    result = apply_retention(store, "orders", POLICY, now=NOW)
    assert _names(ids, result.deleted) == {"A", "C", "I", "J"}
    assert _names(ids, result.kept) == {"B", "D", "E", "F", "G", "H", "K", "L", "M"}
    assert set(store.list_snapshot_ids("orders")) == {ids[k] for k in "BDEFGHKLM"}
    why = {k: " | ".join(next(v for v in result.kept if v.snapshot_id == ids[k]).reasons) for k in "BDEFGHKLM"}
    assert why["B"] == "pinned"
    assert "pinned by its label pin=true" in why["F"]
    assert "newest of its day (2026-11-17)" in why["D"]
    assert "newest known-good for suite shape" in why["E"]
    assert "newest known-good for suite totals" in why["G"]
    assert "abandoned timeline 1, younger than" in why["H"]
    assert "newest of its hour (2026-11-20T09:00Z)" in why["K"]
    assert "newest snapshot of the current timeline 2" in why["M"]
    assert "younger than max age 1h" in why["L"]
    deleted_reasons = {k: next(v for v in result.deleted if v.snapshot_id == ids[k]).reasons for k in "ACIJ"}
    assert deleted_reasons["I"][0].startswith("not kept by any rule (abandoned timeline 1")
    assert deleted_reasons["J"][0].startswith("not kept by any rule (current")
    # Deleted manifests become tombstones; their validation records go with them.
    assert sorted(store.list_tombstones("orders")) == sorted(ids[k] for k in "ACIJ")
    assert store.get_record(tombstone_key("orders", ids["A"])) is not None
    assert store.list_records(f"streams/orders/validations/{ids['A']}/") == []
    assert store.list_records(f"streams/orders/validations/{ids['C']}/") == []
    assert store.list_records(f"streams/orders/validations/{ids['E']}/") != []
    assert result.records_deleted == 2
    # Applying it again deletes nothing more.
    again = apply_retention(store, "orders", POLICY, now=NOW)
    assert again.deleted == ()


def test_a_dry_run_deletes_nothing_and_reports_the_same_decisions(tmp_path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    ids = _history(store)
    before = sorted(p.relative_to(store.root) for p in store.root.rglob("*") if p.is_file())
    dry = apply_retention(store, "orders", POLICY, now=NOW, dry_run=True)
    after = sorted(p.relative_to(store.root) for p in store.root.rglob("*") if p.is_file())
    assert after == before
    assert dry.dry_run and _names(ids, dry.deleted) == {"A", "C", "I", "J"}
    assert dry.to_json()["snapshots_deleted"] == 4


def test_the_policy_is_evaluated_on_creation_time_not_id_order(tmp_path) -> None:
    """A later batch taken earlier (ids sort by batch) is not the newest by time."""
    store = LocalStore(tmp_path / "store", fsync=False)
    late_batch = put_snapshot(store, "s", 9, at("2026-11-20T08:00")).snapshot_id  # sorts last by id
    newer = put_snapshot(store, "s", 3, at("2026-11-20T11:00"), labels={"k": "v"}).snapshot_id
    older = put_snapshot(store, "s", 2, at("2026-11-20T10:00")).snapshot_id
    result = apply_retention(store, "s", RetentionPolicy(keep_last=1), now=NOW, dry_run=True)
    kept = {v.snapshot_id: v.reasons for v in result.kept}
    assert "one of the newest 1 on the current timeline" in kept[newer]
    assert "newest snapshot of the current timeline 1" in kept[late_batch]  # newest batch
    assert older in {v.snapshot_id for v in result.deleted}


def test_at_least_one_snapshot_is_kept(tmp_path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    a = put_snapshot(store, "s", 0, at("2026-01-01T00:00")).snapshot_id
    new_timeline(store, "s", branch_from=None, reason="fresh start, no snapshot yet")
    result = apply_retention(store, "s", RetentionPolicy(keep_last=0, max_age_s=60), now=NOW)
    assert [v.snapshot_id for v in result.kept] == [a]
    assert result.kept[0].reasons == ("keep at least one snapshot",)


def test_unpinned_snapshots_become_deletable(tmp_path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    old = put_snapshot(store, "s", 0, at("2026-01-01T00:00")).snapshot_id
    put_snapshot(store, "s", 1, at("2026-11-20T11:00"))
    assert pin_snapshot(store, "s", old) and not pin_snapshot(store, "s", old)
    assert apply_retention(store, "s", RetentionPolicy(keep_last=1), now=NOW).deleted == ()
    assert unpin_snapshot(store, "s", old) and not unpin_snapshot(store, "s", old)
    assert [v.snapshot_id for v in apply_retention(store, "s", RetentionPolicy(keep_last=1), now=NOW).deleted] == [old]


def test_a_stream_without_snapshots_retains_nothing_and_deletes_nothing(tmp_path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    result = apply_retention(store, "nothing", RetentionPolicy(keep_last=1))
    assert result.kept == () and result.deleted == ()


@pytest.mark.parametrize("text,seconds", [("7d", 604800), ("12h", 43200), ("30m", 1800), ("45s", 45), ("2w", 1209600),
                                          (90, 90), ("600", 600), (timedelta(minutes=2), 120)])
def test_durations_read_as_people_write_them(text, seconds) -> None:
    """As text, a number (of seconds, also as a template renders it) or a timedelta: the same
    rule for the CLI, the operators and the DAG params."""
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "7y", "-1d", "0h", "d", True])
def test_malformed_durations_are_refused_with_a_hint(text) -> None:
    with pytest.raises(UsageError) as exc:
        parse_duration(text)
    assert "7d, 12h" in exc.value.one_line()


def test_a_negative_keep_last_is_refused() -> None:
    with pytest.raises(UsageError, match="keep_last"):
        RetentionPolicy(keep_last=-1)


def test_durations_print_in_their_exact_unit_only_while_short() -> None:
    """An age that happens to be a whole number of minutes (a run at a minute boundary) is
    still printed in days, as any other age of that size."""
    from airflow_provider_streamstate.engine.core.config.values import format_duration

    assert [format_duration(s) for s in (22221 * 60, 90 * 60, 36 * 3600, 7 * 86400, 5)] == [
        "15.4d", "90m", "36h", "1w", "5s"]
