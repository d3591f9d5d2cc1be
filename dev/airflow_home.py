"""A private Airflow home for the demo and the tests: a SQLite metadata DB, a DAG folder
holding the repo's `dags/` (and the caller's extra DAG files), and DAG runs with
Airflow's own runner, `dag.test()`, whose outcome comes back as plain data.

    configure_env(home)          # before Airflow is imported
    prepare(home, extra_dags)    # DAG folder filled, DB migrated (idempotent)
    result = run_dag("streamstate_supervisor", {"streams": [...]})
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class TaskResult:
    state: str | None
    try_number: int
    xcom: Any
    seconds: float | None = None


@dataclass
class DagResult:
    state: str
    tasks: dict[str, TaskResult] = field(default_factory=dict)
    log: str = ""  # everything the run printed: task logs, tracebacks

    def failed_tasks(self) -> list[str]:
        return sorted(t for t, r in self.tasks.items() if r.state == "failed")


def configure_env(home: Path) -> None:
    """Point Airflow at `home`: its SQLite DB and DAG folder (before Airflow is imported).
    Also written to `home/airflow.cfg`, so `AIRFLOW_HOME=<home> airflow standalone` sees
    the same DB and DAGs."""
    home.mkdir(parents=True, exist_ok=True)
    settings = {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "false",
    }
    os.environ.update(settings)
    # Start from scratch when a step fails: no hidden retries unless a DAG asks.
    os.environ.setdefault("AIRFLOW__CORE__DEFAULT_TASK_RETRIES", "0")
    cfg = home / "airflow.cfg"
    if not cfg.exists():
        cfg.write_text(
            f"[core]\ndags_folder = {home / 'dags'}\nload_examples = False\n\n"
            f"[database]\nsql_alchemy_conn = sqlite:///{home / 'airflow.db'}\n"
        )


def fill_dag_folder(dags: Path, extra: list[Path] | None = None, *, refresh: bool = False) -> None:
    """The repo's dags/ and `extra` DAG files, copied into the DAG folder (where missing,
    or all of them with `refresh`)."""
    dags.mkdir(parents=True, exist_ok=True)
    for src in [*(REPO / "dags").glob("*.py"), *(extra or [])]:
        if refresh or not (dags / src.name).exists():
            shutil.copy(src, dags / src.name)


def prepare(home: Path, extra: list[Path] | None = None, *, refresh: bool = False) -> None:
    """Fill the DAG folder and migrate the metadata DB (idempotent; ~12 s the first time)."""
    fill_dag_folder(home / "dags", extra, refresh=refresh)
    subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
        check=True, capture_output=True, text=True, env=os.environ.copy(),
    )


@contextlib.contextmanager
def _captured() -> Iterator[io.StringIO]:
    """Everything printed meanwhile, by Python or by loggers bound to the process's file
    descriptors 1 and 2 (Airflow's structured logs), into the yielded buffer."""
    out = io.StringIO()
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 1)
        os.dup2(tmp.fileno(), 2)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                yield out
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            tmp.seek(0)
            out.write(tmp.read().decode(errors="replace"))


def run_dag(dag_id: str, conf: dict[str, Any] | None = None, extra: list[Path] | None = None) -> DagResult:
    """Run one DAG to its end with Airflow's own runner (deferred triggers run inline).
    A mapped task's instances are `task[0]`, `task[1]`...; `task` is its first."""
    from airflow.dag_processing.dagbag import DagBag

    folder = Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    fill_dag_folder(folder, extra)
    bag = DagBag(dag_folder=str(folder))
    if bag.import_errors:
        raise RuntimeError(f"DAG import errors: {bag.import_errors}")
    dag = bag.get_dag(dag_id)
    if dag is None:
        raise RuntimeError(f"no DAG {dag_id} in {sorted(bag.dag_ids)}")
    with _captured() as out:
        run = dag.test(run_conf=conf or {})
    result = DagResult(state=str(run.state), log=out.getvalue())
    for ti in sorted(run.get_task_instances(), key=lambda t: (t.task_id, t.map_index)):
        mapped = ti.map_index is not None and ti.map_index >= 0
        seconds = (ti.end_date - ti.start_date).total_seconds() if ti.start_date and ti.end_date else None
        task = TaskResult(
            state=None if ti.state is None else str(ti.state),
            try_number=int(ti.try_number or 0),
            # A failed task may have recorded its result before failing (a failed validation does).
            xcom=ti.xcom_pull(task_ids=ti.task_id, map_indexes=ti.map_index if mapped else None),
            seconds=seconds,
        )
        if mapped:
            result.tasks[f"{ti.task_id}[{ti.map_index}]"] = task
        result.tasks.setdefault(ti.task_id, task)
    return result
