"""A person's approval whose wait a DAG run chooses: Airflow's human-in-the-loop
`ApprovalOperator` with its timeout taken from a templated field.

The repair DAG asks before it changes production state; a repair planned on a Friday may
wait for Monday, one planned during an incident for minutes. An unanswered approval fails
when its time is up (Airflow's scheduler times it out), and nothing after it runs, unless
`defaults` names the answer a timeout takes (the repair DAG gives none).
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk.exceptions import AirflowFailException


class TimedApprovalOperator(ApprovalOperator):
    """An approval that waits a run's chosen time for an answer; the rest of its arguments
    (`subject`, `body`, `defaults`, ...) are Airflow's `ApprovalOperator`'s.

    :param hours: how long to wait for an answer, in hours (a number, or a string of one)
        (templated): unanswered by then, the task fails, or takes `defaults` when given.
    """

    template_fields = (*ApprovalOperator.template_fields, "hours")

    def __init__(self, *, hours: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.hours = hours

    def execute(self, context: Any) -> Any:
        self.response_timeout = pendulum.duration(seconds=round(approval_hours(self.hours) * 3600))
        return super().execute(context)


def approval_hours(value: Any) -> float:
    """`value` as a positive number of hours, or a one-line failure no retry can mend."""
    try:
        hours = float(value)
    except (TypeError, ValueError):
        hours = float("nan")
    if not hours > 0 or hours == float("inf"):
        raise AirflowFailException(f"the approval's wait must be a positive number of hours, not {value!r}: "
                                   "give e.g. 24, or 0.5 for half an hour")
    return hours
