"""Running DAGs the way Airflow runs them, inside tests: `dag.test()` against a SQLite
metadata database migrated once per test session, on a DAG folder that holds the repo's
`dags/` and the test DAGs of `tests/dags/` (dag.test only runs DAGs from its DAG folder).
The same runner as `make demo` (dev/airflow_home.py).

    result = run_dag("streamstate_test_snapshot", conf={"stream": spec.to_dict()})
    assert result.state == "success", result.log
    assert result.tasks["snapshot"].xcom["batch_id"] == 7
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dev import airflow_home
from dev.airflow_home import DagResult, TaskResult, configure_env

REPO = Path(__file__).resolve().parent.parent
TEST_DAGS = sorted((REPO / "tests" / "dags").glob("*.py"))
HOME: Path | None = None  # this test process's Airflow home, set once by conftest.py

__all__ = ["DagResult", "TaskResult", "configure_airflow_env", "prepare_airflow", "run_dag", "ui_link"]

configure_airflow_env = configure_env


def prepare_airflow(home: Path) -> None:
    """Fill the DAG folder and migrate the metadata DB (once per session: ~12 s)."""
    airflow_home.prepare(home, TEST_DAGS)


def run_dag(dag_id: str, conf: dict[str, Any] | None = None) -> DagResult:
    """Run one DAG to its end with Airflow's own runner. The DAG folder is refilled where a
    file is missing first: it was seen to vanish between the session's set-up and a run in
    long full-suite runs (cause not found yet)."""
    return airflow_home.run_dag(dag_id, conf, TEST_DAGS)


def ui_link(dag_id: str, task_id: str) -> str | None:
    """The task's "Snapshot" link as the UI's API resolves it (the serialized DAG from the DB,
    `task.get_extra_links`) for the newest try of the task (map index 0 when mapped)."""
    from airflow.models.dagbag import DBDagBag
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        ti = session.scalar(select(TaskInstance).where(TaskInstance.dag_id == dag_id, TaskInstance.task_id == task_id,
                                                       TaskInstance.map_index.in_([-1, 0]))
                            .order_by(TaskInstance.start_date.desc()))
        dag = DBDagBag().get_latest_version_of_dag(dag_id, session=session)
        assert ti is not None and dag is not None
        return dag.get_task(task_id).get_extra_links(ti, "Snapshot")
