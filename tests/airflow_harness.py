"""Running DAGs the way Airflow runs them, inside tests: `dag.test()` against a SQLite
metadata database migrated once per test session, on a DAG folder that holds the repo's
`dags/` and the test DAGs of `tests/dags/` (dag.test only runs DAGs from its DAG folder).

    result = run_dag("streamstate_test_snapshot", conf={"stream": spec.to_dict()})
    assert result.state == "success", result.log
    assert result.tasks["snapshot"].xcom["batch_id"] == 7
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class TaskResult:
    state: str | None
    try_number: int
    xcom: Any


@dataclass
class DagResult:
    state: str
    tasks: dict[str, TaskResult] = field(default_factory=dict)
    log: str = ""  # everything the run printed: task logs, tracebacks

    def failed_tasks(self) -> list[str]:
        return sorted(t for t, r in self.tasks.items() if r.state == "failed")


def configure_airflow_env(home: Path) -> None:
    """Point Airflow at a private home, SQLite DB and DAG folder (before Airflow is imported)."""
    os.environ["AIRFLOW_HOME"] = str(home)
    os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{home / 'airflow.db'}"
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(home / "dags")
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "false"
    # Start from scratch when a step fails in a test: no hidden retries unless a DAG asks.
    os.environ.setdefault("AIRFLOW__CORE__DEFAULT_TASK_RETRIES", "0")


def fill_dag_folder(dags: Path) -> None:
    """The repo's dags/ and the test DAGs, copied into the DAG folder where any is missing."""
    dags.mkdir(parents=True, exist_ok=True)
    for src in [*(REPO / "dags").glob("*.py"), *(REPO / "tests" / "dags").glob("*.py")]:
        if not (dags / src.name).exists():
            shutil.copy(src, dags / src.name)


def prepare_airflow(home: Path) -> None:
    """Fill the DAG folder and migrate the metadata DB (once per session: ~12 s)."""
    fill_dag_folder(home / "dags")
    subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
        check=True, capture_output=True, text=True, env=os.environ.copy(),
    )


def run_dag(dag_id: str, conf: dict[str, Any] | None = None) -> DagResult:
    """Run one DAG to its end with Airflow's own runner (deferred triggers run inline)."""
    from airflow.dag_processing.dagbag import DagBag

    # The folder was seen to vanish between the session's set-up and a run in long full-suite
    # runs (cause not found yet): make sure it holds the DAGs before each run.
    fill_dag_folder(Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"]))
    bag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    assert not bag.import_errors, bag.import_errors
    dag = bag.get_dag(dag_id)
    assert dag is not None, f"no DAG {dag_id} in {sorted(bag.dag_ids)}"
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        run = dag.test(run_conf=conf or {})
    result = DagResult(state=str(run.state), log=out.getvalue())
    for ti in run.get_task_instances():
        result.tasks[ti.task_id] = TaskResult(
            state=None if ti.state is None else str(ti.state),
            try_number=int(ti.try_number or 0),
            xcom=ti.xcom_pull(task_ids=ti.task_id) if ti.state == "success" else None,
        )
    return result
