"""The DAGs in dags/ load without errors, carry what a scheduler needs, and parsing them
imports nothing heavy (pyspark, Great Expectations, boto3, pandas, confluent-kafka): the
DAG processor parses them every few seconds. Their parse time is measured by
benchmarks/dag_parse_bench.py, not asserted here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DAG_FILES = sorted((REPO / "dags").glob("*.py"))
HEAVY = ("pyspark", "great_expectations", "boto3", "botocore", "pandas", "confluent_kafka")


def test_every_dag_file_loads_without_import_errors() -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    assert {"streamstate_scheduled_snapshot", "streamstate_supervisor", "streamstate_store_maintenance",
            "streamstate_deploy_gate", "streamstate_dr_failover", "streamstate_dr_failback",
            "streamstate_pipeline_snapshot"} <= set(bag.dag_ids)
    for dag_id in bag.dag_ids:
        dag = bag.dags[dag_id]
        assert dag is not None and "streamstate" in dag.tags and dag.catchup is False, dag_id
        assert dag.doc_md or dag.description, f"{dag_id} says what it is for"


@pytest.mark.parametrize("path", DAG_FILES, ids=[p.stem for p in DAG_FILES])
def test_parsing_a_dag_file_imports_nothing_heavy(path: Path) -> None:
    code = (
        "import json, runpy, sys, time\n"
        "import airflow.sdk\n"  # paid once by the DAG processor, not by each file
        "t = time.perf_counter()\n"
        f"runpy.run_path({str(path)!r})\n"
        "elapsed = time.perf_counter() - t\n"
        f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "print(json.dumps({'seconds': elapsed, 'heavy': heavy}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"{path.name}: parsed in {report['seconds']:.3f}s")
    assert report["heavy"] == []
