"""Bisect finds the first bad snapshot of a timeline with at most ceil(log2 N) + 1 checks,
reuses stored validation results instead of checking again, and flags a good snapshot seen
after a bad one. Spark is the boundary faked here: a snapshot's "state" is its batch id,
so the search itself is what is under test (tests/integration/test_bisect_poison.py runs
it on a real stream's state)."""

from __future__ import annotations

import math
from datetime import timedelta
from pathlib import Path

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.catalog.snapshots import resolve_snapshot
from airflow_provider_streamstate.engine.catalog.validation_records import (
    ExpectationOutcome,
    ValidationRecord,
    put_validation,
)
from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.engine.state.bisect import bisect_snapshots
from airflow_provider_streamstate.engine.state.reader import StateReader
from airflow_provider_streamstate.engine.state.validation import Suite
from tests.unit.store_history import at, put_snapshot

SUITE = Suite("no-poison", {"name": "no-poison", "expectations": [], "meta": {}}, "test")


class BatchReader(StateReader):
    """A snapshot's state is its batch id (no Spark); counts what it was asked to read."""

    reads = 0

    def state(self, stream, snapshot, selector=None, *, store=None):  # noqa: ANN001, ANN201
        self.reads += 1
        return resolve_snapshot(store or self.store, stream, snapshot).batch_id


def history(tmp_path: Path, n: int) -> tuple[LocalStore, list[str]]:
    store = LocalStore(tmp_path / f"store-{n}")
    start = at("2026-11-20T00:00")
    ids = [put_snapshot(store, "orders", 3 * i, start + timedelta(minutes=i)).snapshot_id for i in range(n)]
    return store, ids


def stored(snapshot_id: str, batch: int, ok: bool, *, sha: str = SUITE.sha256) -> ValidationRecord:
    """A record as validate_snapshot writes it, with one expectation that agrees with `ok`."""
    outcome = ExpectationOutcome("expect_column_max_to_be_between", {"column": "value_max"}, ok, 10 if ok else 10**9)
    return ValidationRecord("orders", snapshot_id, batch, SUITE.name, sha, ok, "2026-11-22T08:00:00Z", "1.24.1", 1.0,
                            {"operator": None, "store_name": None, "join_side": None}, [outcome])


def bound(n: int) -> int:
    return math.ceil(math.log2(n)) + 1 if n > 1 else 1


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 13, 64])
def test_the_first_bad_snapshot_is_found_within_the_bound_wherever_it_is(tmp_path, n) -> None:
    store, ids = history(tmp_path, n)
    positions = range(n + 1) if n <= 13 else [0, 1, 31, 32, 33, 62, 63, 64]
    for first_bad in positions:
        poison_batch = 3 * first_bad

        def no_poison(batch: int, p: int = poison_batch) -> bool:
            return batch < p

        reader = BatchReader(store)
        r = bisect_snapshots(reader, "orders", no_poison)
        if first_bad == n:
            assert r.first_bad is None and r.last_good.snapshot_id == ids[-1]
        else:
            assert r.first_bad.snapshot_id == ids[first_bad], (n, first_bad)
            assert (r.last_good.snapshot_id if r.last_good else None) == (ids[first_bad - 1] if first_bad else None)
        assert r.validations == reader.reads <= bound(n), (n, first_bad, r.to_json()["steps"])
        assert not r.assumption_violated


def test_a_second_bisect_with_a_suite_reuses_every_stored_result(tmp_path) -> None:
    store, ids = history(tmp_path, 16)
    for i, sid in enumerate(ids):
        put_validation(store, stored(sid, 3 * i, i < 11))
    reader = BatchReader(store)
    r = bisect_snapshots(reader, "orders", SUITE)
    assert (r.first_bad.snapshot_id, r.last_good.snapshot_id) == (ids[11], ids[10])
    assert r.validations == 0 and reader.reads == 0
    assert {s.source for s in r.steps} == {"stored"}
    assert r.to_json()["batch_id"] == 33


def test_a_stored_result_of_a_changed_suite_is_not_reused(tmp_path) -> None:
    store, ids = history(tmp_path, 4)
    put_validation(store, stored(ids[3], 9, False, sha="cd" * 32))
    with pytest.raises(UsageError, match="already has a result for suite no-poison from a different definition"):
        bisect_snapshots(BatchReader(store), "orders", SUITE)


def test_a_good_snapshot_after_a_bad_one_is_flagged(tmp_path) -> None:
    store, ids = history(tmp_path, 8)
    verdicts = [True, True, False, False, False, True, False, False]  # 5 passes again: not once-bad-stays-bad
    for i, ok in enumerate(verdicts):
        put_validation(store, stored(ids[i], 3 * i, ok, sha=SUITE.sha256))
    r = bisect_snapshots(BatchReader(store), "orders", SUITE)
    assert (r.first_bad.snapshot_id, r.last_good.snapshot_id) == (ids[2], ids[1])
    assert r.assumption_violated
    assert r.violations == [(ids[2], ids[5])]
    assert "good snapshot(s) after a bad one" in r.summary()
    assert r.to_json()["violations"] == [{"bad": ids[2], "good_after": ids[5]}]


def test_good_and_bad_bound_the_range_and_the_bad_one_is_taken_as_given(tmp_path) -> None:
    store, ids = history(tmp_path, 10)
    reader = BatchReader(store)
    r = bisect_snapshots(reader, "orders", lambda batch: batch < 15, good=ids[2], bad=ids[7])
    assert r.candidates == 5
    assert r.first_bad.snapshot_id == ids[5] and r.last_good.snapshot_id == ids[4]
    assert r.steps[0].source == "given"
    assert r.validations <= bound(5) - 1
    with pytest.raises(UsageError, match="the bad snapshot is not after the good one"):
        bisect_snapshots(reader, "orders", lambda batch: True, good=ids[7], bad=ids[2])
