"""Running DAGs the way Airflow runs them, inside tests: `dag.test()` against a SQLite
metadata database migrated once per test session, on a DAG folder that holds the repo's
`dags/` and the test DAGs of `tests/dags/` (dag.test only runs DAGs from its DAG folder).
The same runner as `make demo` (dev/airflow_home.py).

    result = run_dag("streamstate_test_snapshot", conf={"stream": spec.to_dict()})
    assert result.state == "success", result.log
    assert result.tasks["snapshot"].xcom["batch_id"] == 7
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from dev import airflow_home
from dev.airflow_home import DagResult, TaskResult, configure_env

REPO = Path(__file__).resolve().parent.parent
TEST_DAGS = sorted((REPO / "tests" / "dags").glob("*.py"))
HOME: Path | None = None  # this test process's Airflow home, set once by conftest.py

__all__ = ["DagResult", "NoAnswer", "Person", "TaskResult", "answer_approval", "configure_airflow_env", "prepare_airflow",
           "run_dag", "ui_link"]

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


def _asking(client: Any, headers: dict[str, str], dag_id: str, task_id: str, deadline: float) -> dict[str, Any]:
    """The request `task_id` of a running `dag_id` shows in Required Actions, once the task
    itself waits for it (its request is written first)."""
    import time

    while True:
        listed = client.get(f"/api/v2/dags/{dag_id}/dagRuns/~/hitlDetails", headers=headers,
                            params={"response_received": False})
        assert listed.status_code == 200, listed.text
        asking = [d for d in listed.json()["hitl_details"] if d["task_instance"]["task_id"] == task_id
                  and d["task_instance"]["state"] == "awaiting_input"]
        if asking:
            return dict(asking[0])
        assert time.monotonic() < deadline, f"{dag_id}.{task_id} never asked for a response"
        time.sleep(1)


def _api_client() -> tuple[Any, dict[str, str]]:
    """Airflow's REST API on this process's metadata DB, and the headers of its first user."""
    import os
    import secrets

    from airflow.api_fastapi.app import create_app, get_auth_manager
    from fastapi.testclient import TestClient

    os.environ.setdefault("AIRFLOW__API_AUTH__JWT_SECRET", secrets.token_urlsafe(64))
    app = create_app()
    am = get_auth_manager()
    return TestClient(app), {"Authorization": f"Bearer {am.generate_jwt(am.get_users()[0])}"}


def answer_approval(dag_id: str, task_id: str, option: str, *, timeout_s: float = 900.0,
                    meanwhile: Callable[[dict[str, Any]], None] = lambda asked: None) -> dict[str, Any]:
    """What a person does in Airflow's UI (Required Actions), through Airflow's own REST
    API on this process's metadata DB: wait until `task_id` of a running `dag_id` asks,
    read what it shows, and answer `option` (after `meanwhile(request)`: what happens while
    the person decides). Returns the request as the API listed it (`subject`, `body`,
    `options`, ...). Run it in a thread beside `run_dag`."""
    import time

    client, headers = _api_client()
    deadline = time.monotonic() + timeout_s
    with client:
        # Answered before the task itself waits (its request is written first), the response
        # is recorded but nothing moves the task on: dag.test would wait for ever.
        detail = _asking(client, headers, dag_id, task_id, deadline)
        meanwhile(detail)
        ti = detail["task_instance"]
        answered = client.patch(
            f"/api/v2/dags/{dag_id}/dagRuns/{ti['dag_run_id']}/taskInstances/{task_id}/{ti['map_index']}/hitlDetails",
            headers=headers, json={"chosen_options": [option]})
        assert answered.status_code == 200, answered.text
        moved_by = time.monotonic() + 120
        while _waiting(dag_id, task_id):  # the answer moves the task on (else the thread fails it)
            assert time.monotonic() < moved_by, f"{dag_id}.{task_id} still waits 120 s after its answer"
            time.sleep(1)
        return dict(detail)


def _waiting(dag_id: str, task_id: str) -> bool:
    from airflow.utils.session import create_session

    with create_session() as session:
        return next(iter(_waiting_tis(session, dag_id, task_id)), None) is not None


def _waiting_tis(session: Any, dag_id: str, task_id: str) -> Any:
    """The task instances of `task_id` waiting for a person's answer."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy import select

    return session.scalars(select(TaskInstance).where(
        TaskInstance.dag_id == dag_id, TaskInstance.task_id == task_id,
        TaskInstance.state == TaskInstanceState.AWAITING_INPUT))


class _Beside:
    """What a person does with `task_id` of the next run of `dag_id`, in a thread beside
    `run_dag`: `act()` returns what the task asked. When it fails, the waiting task is failed
    instead, so that the run ends (dag.test would wait on), and `asked()` raises what went
    wrong."""

    doing = "answering"

    def __init__(self, dag_id: str, task_id: str) -> None:
        import threading

        self.dag_id, self.task_id = dag_id, task_id
        self._asked: dict[str, Any] = {}
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"{self.doing}-{task_id}", daemon=True)
        self._thread.start()

    def act(self) -> dict[str, Any]:
        raise NotImplementedError

    def _run(self) -> None:
        try:
            self._asked = self.act()
        except BaseException as exc:  # noqa: BLE001 - reported by asked()
            self._error = exc
            _fail_waiting(self.dag_id, self.task_id)

    def asked(self) -> dict[str, Any]:
        """What the task asked (`subject`, `body`, `options`...), once it was answered or
        timed out."""
        self._thread.join(timeout=60)
        if self._error is not None:
            raise AssertionError(f"{self.doing} {self.dag_id}.{self.task_id} failed: {self._error!r}") from self._error
        assert self._asked, f"{self.dag_id}.{self.task_id} never asked"
        return self._asked


class Person(_Beside):
    """A person who answers `task_id` of the next run of `dag_id` with `option`; `meanwhile`
    is what happens while the person decides (given what the task asked)."""

    def __init__(self, dag_id: str, task_id: str, option: str,
                 meanwhile: Callable[[dict[str, Any]], None] = lambda asked: None) -> None:
        self.option, self.meanwhile = option, meanwhile
        super().__init__(dag_id, task_id)

    def act(self) -> dict[str, Any]:
        return answer_approval(self.dag_id, self.task_id, self.option, meanwhile=self.meanwhile)


def _fail_waiting(dag_id: str, task_id: str) -> None:
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState

    with create_session() as session:
        for ti in list(_waiting_tis(session, dag_id, task_id)):
            ti.state = TaskInstanceState.FAILED


class NoAnswer(_Beside):
    """Nobody answers `task_id` of the next run of `dag_id`: once it waits, the scheduler's
    own timeout sweep (`check_awaiting_input_timeouts`, which `dag.test` does not run) is run
    every second until the task's response timeout has passed and the sweep moved it on. A
    thread beside `run_dag`; `asked()` is what the task showed meanwhile."""

    doing = "waiting out"

    def __init__(self, dag_id: str, task_id: str, *, timeout_s: float = 900.0) -> None:
        self.timeout_s = timeout_s
        super().__init__(dag_id, task_id)

    def act(self) -> dict[str, Any]:
        import time

        from airflow.jobs.job import Job
        from airflow.jobs.scheduler_job_runner import SchedulerJobRunner

        client, headers = _api_client()
        deadline = time.monotonic() + self.timeout_s
        with client:
            asked = _asking(client, headers, self.dag_id, self.task_id, deadline)
        scheduler = SchedulerJobRunner(job=Job())
        while _waiting(self.dag_id, self.task_id):
            assert time.monotonic() < deadline, f"{self.dag_id}.{self.task_id} still waits {self.timeout_s:.0f} s on"
            scheduler.check_awaiting_input_timeouts()
            time.sleep(1)
        return asked
