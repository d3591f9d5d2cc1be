"""A state job whose Spark application runs on a Python that does not have this package: the
submit ships the package's code as a zip in its py-files (engine/streams/package_code.py),
and the application answers from that code as Spark's own state reader answers on the same
snapshot. The Python is a virtualenv made here from what the main one has installed (no
download): pyspark, lz4, xxhash and Great Expectations with their dependencies, nothing
else, plus an old copy of this package that fails on import, which the shipped code must
win over. Locally (`--master local[1]`, shipping asked for); on the run's YARN cluster in
cluster mode from a worker with no extra, the platform's Spark (3.5, 4.3) as SPARK_HOME
(shipping by default: the driver in the application master's container, on a Python with
that line's pyspark and Great Expectations); and a rescale's repartition job, whose
executors decode the state with the shipped code."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.cli import main
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from dev import spark_versions
from tests.cluster_python import cluster_python
from tests.goldens import Golden, golden

pytestmark = [pytest.mark.integration]

@pytest.fixture(scope="module")
def python_without_streamstate(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("cluster-python")
    python = cluster_python(root / "env")
    probe = subprocess.run([str(python), "-c", "import pyspark, lz4, xxhash, great_expectations, airflow_provider_streamstate"],
                           capture_output=True, text=True, cwd=root)
    assert "the copy of streamstate installed on the cluster was imported" in probe.stderr, probe.stderr
    for absent in ("airflow", "boto3"):
        assert subprocess.run([str(python), "-c", f"import {absent}"], capture_output=True, cwd=root).returncode != 0
    return str(python)


GOLDEN_CASE = "small_aggregation_rocksdb_changelog"
ANSWER_TIMEOUT_S = 600  # a validation on YARN answers in about 30 s
PROBE_WORKER = """
import importlib.util, json, os
from importlib.metadata import distributions
spec = importlib.util.find_spec("pyspark")
print(json.dumps({
    "great_expectations": importlib.util.find_spec("great_expectations") is not None,
    "pyspark_jars": spec is not None and os.path.isdir(os.path.join(os.path.dirname(spec.origin), "jars")),
    "pyspark_dist": next((d.metadata["Name"] for d in distributions() if d.metadata["Name"].startswith("pyspark")),
                         None),
}))
"""


def _snapshot(tmp_path: Path) -> tuple[Golden, LocalStore, str]:
    g = golden(GOLDEN_CASE)
    store = LocalStore(tmp_path / "store")
    snapshot = create_snapshot(g.copy_to(tmp_path / "checkpoint"), store, "golden", batch_id=g.last_batch)
    return g, store, snapshot.manifest.snapshot_id


def _suite(tmp_path: Path, sums: list[int]) -> Path:
    """Row count and the largest sum as Spark's reader saw them (pass), and a bound that the
    sums above the median break (fail)."""
    median = sorted(sums)[len(sums) // 2]
    suite = {"name": "golden-sums", "expectations": [
        {"type": "expect_table_row_count_to_equal", "kwargs": {"value": len(sums)}},
        {"type": "expect_column_max_to_be_between", "kwargs": {"column": "value_sum", "min_value": max(sums),
                                                                "max_value": max(sums)}},
        {"type": "expect_column_values_to_be_between", "kwargs": {"column": "value_sum", "max_value": median}},
    ]}
    path = tmp_path / "suite.json"
    path.write_text(json.dumps(suite))
    return path


def _validate(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code = main(["validate", *argv, "--json"])
    out = capsys.readouterr()
    assert code == 3, out.err  # the suite fails, as it must
    return dict(json.loads(out.out.strip().splitlines()[-1]))


def _assert_answers_as_sparks_reader(store: LocalStore, snapshot_id: str, sums: list[int]) -> None:
    """The validation the job recorded observed what Spark's reader returned on the golden."""
    from airflow_provider_streamstate.engine.catalog.validation_records import get_validation

    record = get_validation(store, "golden", snapshot_id, "golden-sums")
    assert record is not None and not record.success
    outcomes = {o.type: o for o in record.results}
    assert [o.success for o in record.results] == [True, True, False]
    assert outcomes["expect_table_row_count_to_equal"].observed == len(sums)
    assert outcomes["expect_column_max_to_be_between"].observed == max(sums)
    broken = outcomes["expect_column_values_to_be_between"].observed
    median = sorted(sums)[len(sums) // 2]
    assert (broken["element_count"], broken["unexpected_count"]) == (len(sums), sum(s > median for s in sums))


def test_a_validation_on_a_python_without_this_package_runs_the_shipped_code_and_answers_as_sparks_reader(
    python_without_streamstate, capsys, monkeypatch, tmp_path
) -> None:
    monkeypatch.setenv("STREAMSTATE_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)  # not the repository's root: a Python started there would import its package
    g, store, snapshot_id = _snapshot(tmp_path)
    sums = [row.value[0] for row in g.state().rows]
    result = _validate(capsys, "--store", store.url, "--stream", "golden", snapshot_id,
                       "--suite", str(_suite(tmp_path, sums)), "--master", "local[1]", "--ship-code",
                       "--conf", f"spark.pyspark.python={python_without_streamstate}",
                       "--conf", "spark.sql.shuffle.partitions=2")
    assert result["ran_on"]["python"] == python_without_streamstate
    zips = list((tmp_path / "home" / "py-files").glob("streamstate-code-*.zip"))
    assert len(zips) == 1 and result["ran_on"]["package"] == f"{zips[0]}/airflow_provider_streamstate"
    assert result["failed"][0]["type"] == "expect_column_values_to_be_between"
    _assert_answers_as_sparks_reader(store, snapshot_id, sums)


@pytest.mark.yarn
@pytest.mark.spark_lines
@pytest.mark.parametrize("line", ["3.5", "4.3"])
def test_a_thin_worker_validates_on_yarn_with_the_platforms_spark_and_gx_only_in_the_cluster(
    line, yarn, tmp_path
) -> None:
    """A platform's worker: Airflow with this package and no extra (no pyspark, no Great
    Expectations: `.venv-worker`), the platform's Spark installation as SPARK_HOME (a line
    other than the package's own: 3.5, 4.3), and no option but the master. The submit ships
    the code by default; the driver runs in the application master's container on the
    cluster's Python, which has that line's pyspark and Great Expectations but not this
    package, from the zip YARN localized there."""
    from dev.spark_cds import with_archive_of
    from tests.test_worker_install import WORKER, worker_env

    if not (WORKER / ".installed").is_file():
        pytest.fail(f"no worker virtualenv at {WORKER}: run `make setup`")
    spark = spark_versions.get(line).require()
    python = str(cluster_python(tmp_path / "cluster-env", source=spark.venv))
    g = golden(GOLDEN_CASE, line)
    store = LocalStore(tmp_path / "store")
    snapshot_id = create_snapshot(g.copy_to(tmp_path / "checkpoint"), store, "golden",
                                  batch_id=g.last_batch).manifest.snapshot_id
    sums = [row.value[0] for row in g.state().rows]
    python_confs = {k: python for k in ("spark.pyspark.python", "spark.yarn.appMasterEnv.PYSPARK_PYTHON",
                                        "spark.executorEnv.PYSPARK_PYTHON")}
    conf = {**yarn.pyspark_conf(tmp_path / "staging", spark_home=spark.spark_home, python=python), **python_confs,
            "spark.sql.shuffle.partitions": "2"}
    env = worker_env(tmp_path, **yarn.env(), SPARK_HOME=str(spark.spark_home))
    if "SPARK_SUBMIT_OPTS" in env:  # this line's class data sharing archive, not the main line's
        env["SPARK_SUBMIT_OPTS"] = with_archive_of(env["SPARK_SUBMIT_OPTS"], spark.spark_home)
    # The worker has no Great Expectations and no Spark of its own: its `pyspark` is the
    # Spark Connect client the apache-spark provider 6.x requires (no jars, no spark-submit).
    probe = subprocess.run([str(WORKER / "bin" / "python"), "-c", PROBE_WORKER], capture_output=True, text=True,
                           cwd=tmp_path, env=env)
    assert json.loads(probe.stdout) == {"great_expectations": False, "pyspark_jars": False,
                                        "pyspark_dist": "pyspark-client"}, probe.stderr
    try:
        out = subprocess.run(
            [str(WORKER / "bin" / "streamstate"), "validate", "--store", store.url, "--stream", "golden", snapshot_id,
             "--suite", str(_suite(tmp_path, sums)), "--master", "yarn", "--deploy-mode", "cluster", "--json",
             *(a for k, v in conf.items() for a in ("--conf", f"{k}={v}"))],
            capture_output=True, text=True, timeout=ANSWER_TIMEOUT_S, cwd=tmp_path, env=env)
    except subprocess.TimeoutExpired:  # say where it waited: the submit's log goes with tmp_path
        logs = sorted((tmp_path / "streamstate-home").rglob("*.log"))
        pytest.fail(f"no answer in {ANSWER_TIMEOUT_S} s; YARN's unhealthy nodes: {yarn.unhealthy_nodes()}; "
                    + "".join(f"\n--- {p}:\n{p.read_text(errors='replace')[-3000:]}" for p in logs))
    if spark.major_minor < (4, 0):  # no state data source: refused at once, nothing submitted
        assert out.returncode == 1 and out.stdout == "", out.stderr[-3000:]
        assert out.stderr.startswith(f"streamstate: error: Spark {spark.pyspark} has no state data source"), out.stderr
        assert len(out.stderr.strip().splitlines()) == 1 and not (tmp_path / "staging").exists()
        assert not list((tmp_path / "streamstate-home").rglob("*.log"))
        return
    assert out.returncode == 3, out.stderr[-3000:]  # the suite fails, as it must
    result = json.loads(out.stdout.strip().splitlines()[-1])
    ran_on = result["ran_on"]
    assert (ran_on["master"], ran_on["deploy_mode"], ran_on["python"]) == ("yarn", "cluster", python)
    assert ran_on["spark"] == spark.pyspark
    (shipped,) = (tmp_path / "streamstate-home" / "py-files").glob("streamstate-code-*.zip")
    assert ran_on["package"].endswith(f"/{shipped.name}/airflow_provider_streamstate")
    assert not ran_on["package"].startswith(str(shipped.parent))  # YARN's copy in the container, not ours
    assert result["failed"][0]["type"] == "expect_column_values_to_be_between"
    _assert_answers_as_sparks_reader(store, snapshot_id, sums)


@pytest.mark.spark_lines
def test_a_repartition_on_a_python_without_this_package_verifies_on_the_executors_with_the_shipped_code(
    tmp_path, monkeypatch
) -> None:
    """The rescale's job (Spark 4.3: the first line that repartitions) through the engine's
    runner, shipping asked for on a local master whose Python (driver and executors) has
    only pyspark, lz4 and xxhash: the executors decode the state with the shipped code and
    the copy verifies."""
    from airflow_provider_streamstate.engine.checkpoint.filesystems import open_checkpoint_fs
    from airflow_provider_streamstate.engine.checkpoint.repartition import read_repartition_record
    from airflow_provider_streamstate.engine.state.rescale import rescale_job_application
    from airflow_provider_streamstate.engine.streams.applications import run_job

    monkeypatch.setenv("STREAMSTATE_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    spark43 = spark_versions.get("4.3").require()
    python = cluster_python(tmp_path / "env", ("pyspark", "lz4", "xxhash"), source=spark43.venv)
    g = golden(GOLDEN_CASE, "4.3")
    checkpoint = g.copy_to(tmp_path / "checkpoint")
    for planned in Path(checkpoint, "offsets").glob("*[0-9]*"):  # Spark repartitions a stopped query's last commit
        if int(planned.name.strip(".").removesuffix(".crc")) > g.last_batch:
            planned.unlink()  # the batch planned after it, and its Hadoop checksum file

    def command(args: Any) -> tuple[list[str], dict[str, str]]:
        return spark43.submit_command(rescale_job_application(), list(args), master="local[2]",
                                      conf={"spark.pyspark.python": str(python)}), spark43.env()

    app = run_job(command, [checkpoint, "8"], logs="rescale", job_id="shipped", name="rescale-shipped",
                  what="the repartition", ship_code=True)
    log = Path(app.log_path).read_text()
    assert app.proc is not None and app.proc.returncode == 0, log[-3000:]
    assert "--py-files" in log and "streamstate-code-" in log
    record = read_repartition_record(open_checkpoint_fs(checkpoint))
    assert record is not None and record.ok and record.partitions == 8
    v = record.verification
    assert v is not None and v.ok and v.problems == () and v.tasks > 0 and v.executors >= 1
