"""StateKeyCheckOperator: every check runs, the task fails without retry naming each check
that did not hold (after recording its result, so the Snapshot link works on a failed gate),
a snapshot or the live checkpoint is read, and checks it cannot understand are refused in
one line before any key is read."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.lookup.predicate import values_match
from airflow_provider_streamstate.operators.lookup import StateKeyCheckOperator
from tests.unit.state_files import Aggregation


class RecordingTI:
    """What the operator uses of the task instance: xcom_push."""

    def __init__(self) -> None:
        self.pushed: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


@pytest.fixture
def spec(tmp_path: Path) -> dict[str, Any]:
    agg = Aggregation(tmp_path / "ckpt")
    agg.commit({"a": 1, "b": 2})
    store = LocalStore(tmp_path / "store", fsync=False)
    create_snapshot(str(agg.root), store, "orders")
    agg.commit({"a": 5})
    return {"name": "orders", "checkpoint": str(agg.root), "store": f"file://{store.root}"}


def run(spec: dict[str, Any], checks: Any, **kw: Any) -> tuple[dict[str, Any] | None, RecordingTI]:
    ti = RecordingTI()
    out = StateKeyCheckOperator(task_id="check", stream=spec, checks=checks, **kw).execute({"ti": ti})  # type: ignore[arg-type]
    return out, ti


def test_checks_that_hold_pass_with_a_small_result(spec) -> None:
    out, ti = run(spec, [{"key": {"k": "a"}, "value": {"n": 1}}, {"key": "k=b", "where": "n >= 2"},
                         {"key": ["zz"], "absent": True}, {"key": "b"}, {"key": "k=q", "value": None}])
    assert out is not None and (out["checked"], out["passed"], out["failed"], out["batch_id"]) == (5, 5, [], 0)
    assert out["snapshot_id"] and out["results"][0] == {"key": '{"k": "a"}', "ok": True, "found": True,
                                                         "partition": out["results"][0]["partition"]}
    assert ti.pushed == {}


def test_the_live_checkpoint_is_read_with_checkpoint_true(spec) -> None:
    out, _ = run(spec, [{"key": "k=a", "value": {"n": 5}}], checkpoint=True)
    assert out is not None and (out["snapshot_id"], out["batch_id"], out["passed"]) == (None, 1, 1)


def test_a_failed_check_fails_the_task_once_naming_it_after_recording_the_result(spec) -> None:
    with pytest.raises(AirflowFailException) as err:
        run(spec, '[{"key": "k=a", "value": {"n": 2}}, {"key": "k=b", "absent": true}, {"key": "k=c"},'
                  ' {"key": "k=a", "where": "n > 1"}, {"key": "k=b", "value": {"n": 2}}]')
    line = str(err.value)
    assert "\n" not in line and line.startswith("4 of 5 key check(s) failed in snapshot ")
    assert '{"k": "a"}: expected {"n": 2}, holds {"n": 1}' in line
    assert '{"k": "b"}: expected absent, holds {"n": 2}' in line
    assert '{"k": "c"}: expected present, is absent' in line
    assert '{"k": "a"}: `n > 1` does not hold for {"n": 1}' in line


def test_the_result_of_a_failed_gate_is_recorded_for_its_link(spec) -> None:
    ti = RecordingTI()
    op = StateKeyCheckOperator(task_id="check", stream=spec, checks=[{"key": "k=a", "value": {"n": 9}}])
    with pytest.raises(AirflowFailException):
        op.execute({"ti": ti})  # type: ignore[arg-type]
    result = ti.pushed["return_value"]
    assert (result["stream"], result["store"], result["passed"]) == ("orders", spec["store"], 0)
    assert result["snapshot_id"] and result["failed"][0]["key"] == '{"k": "a"}'


@pytest.mark.parametrize(("checks", "words"), [
    ([], "non-empty list"), ("not json", "checks is not JSON"), ([{"value": 1}], "check 1 has no key"),
    ([{"key": "k=a", "valeu": 1}], "unknown field 'valeu'"),
    ([{"key": "k=a", "value": {"n": 1}, "absent": True}], "more than one of value, where, absent"),
    ([{"key": "k=a", "where": "n >"}], "cannot read the condition"),
    ([{"key": "x=a"}], "no column 'x'"),
])
def test_checks_it_cannot_understand_are_refused_in_one_line(spec, checks, words) -> None:
    with pytest.raises(AirflowFailException) as err:
        run(spec, checks)
    assert words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(("expected", "actual", "match"), [
    ({"sum": 12.5}, {"sum": Decimal("12.50"), "count": 3}, True),
    ({"sum": "12.5"}, {"sum": Decimal("12.50")}, True),
    ({"count": 3}, {"count": 4}, False),
    ({"missing": 1}, {"count": 4}, False),
    ([{"x": 1}, {"x": 2}], [{"x": 1}, {"x": 2}], True),
    ([{"x": 1}], [{"x": 1}, {"x": 2}], False),
    ({"end": "2026-01-01T00:00:00Z"}, {"end": datetime(2026, 1, 1, tzinfo=UTC)}, True),
    ({"v": None}, {"v": None}, True),
])
def test_expected_values_compare_as_the_values_types(expected, actual, match) -> None:
    assert values_match(expected, actual) is match
