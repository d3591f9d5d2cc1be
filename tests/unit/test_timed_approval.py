"""The repair DAG's approval takes its wait from the run (operators/approval.py)."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider_streamstate.operators.approval import TimedApprovalOperator, approval_hours


@pytest.mark.parametrize(("given", "hours"), [(24, 24.0), ("0.5", 0.5), (" 2 ", 2.0)])
def test_the_wait_is_read_as_hours_from_a_number_or_its_text(given: object, hours: float) -> None:
    assert approval_hours(given) == hours


@pytest.mark.parametrize("given", ["a day", "", None, 0, -1, "nan", "inf"])
def test_a_wait_that_is_not_a_positive_number_of_hours_fails_in_one_line_before_anyone_is_asked(given: object) -> None:
    approval = TimedApprovalOperator(task_id="approve", subject="s", hours=given)
    with pytest.raises(AirflowFailException, match="positive number of hours") as failed:
        approval.execute({})
    assert "\n" not in str(failed.value)
