"""docs/first-dag.md's code is what a reader copies: each ```python block, written to a DAG
folder under the file name on its first line, loads in Airflow's own DagBag (the bundle
DagBag the DAG processor uses, which puts the folder on sys.path) without import errors,
serialises as the DAG processor serialises it, and has the DAGs and the task chains the
page's prose names, with the operator classes it describes."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "first-dag.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
CHAIN = re.compile(r"^The DAG `(\w+)` runs ((?:`\w+`(?: >> )?)+)\.$", re.M)
# What the page says each task is (its prose and the reference name these classes).
CLASSES = {
    "start": "StartStreamOperator",
    "wait_for_progress": "StreamProgressSensor",
    "snapshot": "SnapshotStreamOperator",
    "stop": "StopStreamOperator",
    "restore": "RestoreSnapshotOperator",
}


def page_files() -> dict[str, str]:
    """{file name: code} of every python block; the first line names the file."""
    files = {}
    for code in BLOCK.findall(PAGE.read_text()):
        first = code.splitlines()[0]
        m = re.fullmatch(r"# dags/(\w+\.py)", first)
        assert m, f"a python block of {PAGE.name} must start with '# dags/<file>.py', not {first!r}"
        files[m.group(1)] = code
    return files


def page_chains() -> dict[str, list[str]]:
    return {dag_id: re.findall(r"`(\w+)`", chain) for dag_id, chain in CHAIN.findall(PAGE.read_text())}


@pytest.fixture(scope="module")
def bag(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201 - Airflow's DagBag, imported lazily
    from airflow.dag_processing.dagbag import BundleDagBag

    folder = tmp_path_factory.mktemp("first-dag") / "dags"
    folder.mkdir()
    for name, code in page_files().items():
        (folder / name).write_text(code)
    modules_before = set(sys.modules)
    path_before = list(sys.path)
    try:
        yield BundleDagBag(dag_folder=str(folder), bundle_path=folder)
    finally:  # the bag put the folder on sys.path and imported its stream module
        sys.path[:] = path_before
        for name in set(sys.modules) - modules_before:
            if name == "orders_stream" or name.startswith("unusual_prefix"):
                del sys.modules[name]


def test_the_page_has_the_stream_module_and_two_dag_files() -> None:
    assert sorted(page_files()) == ["orders_rollback.py", "orders_start_and_snapshot.py", "orders_stream.py"]


def test_every_block_loads_without_import_errors(bag) -> None:  # noqa: ANN001
    assert bag.import_errors == {}


def test_the_dags_are_the_ones_the_page_names_with_its_task_chains(bag) -> None:  # noqa: ANN001
    chains = page_chains()
    assert chains == {
        "orders_start_and_snapshot": ["start", "wait_for_progress", "snapshot"],
        "orders_rollback": ["stop", "restore", "start", "wait_for_progress"],
    }
    assert set(bag.dag_ids) == set(chains)
    for dag_id, chain in chains.items():
        dag = bag.dags[dag_id]
        assert sorted(dag.task_ids) == sorted(chain), dag_id
        for upstream, downstream in zip(chain, chain[1:], strict=False):
            assert dag.get_task(upstream).downstream_task_ids == {downstream}, (dag_id, upstream)
        for task in dag.tasks:
            assert type(task).__name__ == CLASSES[task.task_id], (dag_id, task.task_id)


def test_the_sensors_on_the_page_defer_and_the_rollback_restores_latest_in_place(bag) -> None:  # noqa: ANN001
    for dag_id in ("orders_start_and_snapshot", "orders_rollback"):
        assert bag.dags[dag_id].get_task("wait_for_progress").deferrable is True, dag_id
    rollback = bag.dags["orders_rollback"]
    restore = rollback.get_task("restore")
    assert restore.force is True
    assert rollback.params["snapshot"] == "latest"
    assert restore.snapshot == "{{ params.snapshot }}"


def test_the_dags_serialise_as_the_dag_processor_stores_them(bag) -> None:  # noqa: ANN001
    from airflow.serialization.serialized_objects import DagSerialization

    for dag_id in bag.dag_ids:
        data = DagSerialization.to_dict(bag.dags[dag_id])
        assert data["dag"]["dag_id"] == dag_id
