"""An Airflow worker as a platform team runs it: Airflow 3.3.2 with the current amazon, kafka
and apache-spark (6.x, with its pyspark-client) providers, and this package without extras
(`.venv-worker`, built by `make setup` from dev/worker-env/worker.lock: nothing is downloaded
here). There the package downgrades nothing, brings no pyspark, pandas or Great
Expectations of its own, the DAGs parse, the CLI starts, snapshots, restores and reads a key
of an S3 checkpoint, and what needs an extra says which, in one line."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.goldens import golden

REPO = Path(__file__).resolve().parent.parent
WORKER = REPO / ".venv-worker"
LOCKS = REPO / "dev" / "worker-env"
CASE = "small_aggregation_rocksdb_changelog"


def pins(lock: Path) -> dict[str, str]:
    return dict(line.split("==", 1) for line in lock.read_text().splitlines() if "==" in line and line[0] != " ")


def worker_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A worker's environment: its own bin first on the PATH, its own Airflow home, nothing
    of the test process's virtualenv."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "SPARK_HOME")}
    env["PATH"] = f"{WORKER / 'bin'}:/usr/bin:/bin"
    home = tmp_path / "airflow-home"
    env.update(AIRFLOW_HOME=str(home), AIRFLOW__CORE__LOAD_EXAMPLES="false",
               AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home / 'airflow.db'}",
               STREAMSTATE_HOME=str(tmp_path / "streamstate-home"))
    return {**env, **extra}


def run(tmp_path: Path, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env=worker_env(tmp_path, **(env or {})))


def streamstate(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run(tmp_path, str(WORKER / "bin" / "streamstate"), *args, env=env)


def python(tmp_path: Path, code: str) -> dict:
    out = run(tmp_path, str(WORKER / "bin" / "python"), "-c", code)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(autouse=True)
def _worker_installed() -> None:
    if not (WORKER / ".installed").is_file():
        pytest.fail(f"no worker virtualenv at {WORKER}: run `make setup`")


def test_the_package_downgrades_nothing_of_the_platform_and_adds_only_its_core() -> None:
    platform, worker = pins(LOCKS / "platform.lock"), pins(LOCKS / "worker.lock")
    assert {name: (version, worker.get(name)) for name, version in platform.items() if worker.get(name) != version} == {}
    assert worker["apache-airflow"] == "3.3.2" and worker["apache-airflow-providers-apache-spark"].startswith("6.")
    assert "pyspark" not in worker and "great-expectations" not in worker and "pyspark-client" in worker
    assert sorted(set(worker) - set(platform)) == ["lz4", "xxhash"]  # boto3, confluent-kafka...: the platform's


def test_the_installed_package_needs_no_extra_and_has_none(tmp_path: Path) -> None:
    facts = python(tmp_path, (
        "import json, importlib.metadata as md\n"
        "from packaging.requirements import Requirement\n"
        "def version(name):\n"
        "    try: return md.version(name)\n"
        "    except md.PackageNotFoundError: return None\n"
        "core = [r for r in map(Requirement, md.requires('airflow-provider-streamstate')) if not r.marker]\n"
        "unmet = [str(r) for r in core if not (version(r.name) and r.specifier.contains(version(r.name)))]\n"
        "print(json.dumps({'unmet': unmet, 'core': len(core), 'absent': [n for n in ('pyspark', 'great-expectations')\n"
        "                  if version(n) is None]}))"))
    assert facts["unmet"] == [] and facts["core"] >= 8, facts
    assert facts["absent"] == ["pyspark", "great-expectations"], facts


def test_the_dags_parse_and_the_cli_starts(tmp_path: Path) -> None:
    facts = python(tmp_path, (
        "import json, sys\n"
        "from airflow.dag_processing.dagbag import DagBag\n"
        f"bag = DagBag(dag_folder={str(REPO / 'dags')!r})\n"
        "heavy = [m for m in ('pyspark', 'great_expectations', 'pandas') if m in sys.modules]\n"
        "print(json.dumps({'errors': {k: v[-500:] for k, v in bag.import_errors.items()},\n"
        "                  'dags': sorted(bag.dag_ids), 'heavy': heavy}))"))
    assert facts["errors"] == {} and facts["heavy"] == [], facts
    assert {"streamstate_scheduled_snapshot", "streamstate_supervisor", "streamstate_store_maintenance"} <= set(
        facts["dags"])
    helped = streamstate(tmp_path, "--help")
    assert helped.returncode == 0 and "snapshot" in helped.stdout, helped.stderr


def test_what_needs_an_extra_says_which_in_one_line(tmp_path: Path) -> None:
    store = tmp_path / "store"
    assert streamstate(tmp_path, "snapshot", "create", "--checkpoint", str(golden(CASE).checkpoint), "--store",
                       str(store), "--stream", "s").returncode == 0
    shown = streamstate(tmp_path, "state", "show", "--store", str(store), "--stream", "s", "latest")
    assert shown.returncode == 2 and "Traceback" not in shown.stderr, shown.stderr
    assert shown.stderr.strip().count("\n") == 0, shown.stderr
    assert "pip install 'airflow-provider-streamstate[spark]'" in shown.stderr, shown.stderr

    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps({"name": "s", "expectations": [
        {"type": "expect_table_row_count_to_be_between", "kwargs": {"min_value": 1}}]}))
    validated = streamstate(tmp_path, "validate", "--store", str(store), "--stream", "s", "latest", "--suite",
                            str(suite))
    assert validated.returncode == 2 and "Traceback" not in validated.stderr, validated.stderr
    assert validated.stderr.strip().count("\n") == 0, validated.stderr
    assert "pip install 'airflow-provider-streamstate[gx]'" in validated.stderr, validated.stderr

    # In a task: the engine's errors become AirflowFailException, this one too (no retry helps).
    facts = python(tmp_path, (
        "import json\n"
        "from airflow.sdk.exceptions import AirflowFailException\n"
        "from airflow_provider_streamstate.utils.task_errors import engine_errors\n"
        "from airflow_provider_streamstate.engine.state.validation import load_suite\n"
        "try:\n"
        "    with engine_errors():\n"
        f"        load_suite({str(suite)!r}, check=True)\n"
        "except AirflowFailException as exc:\n"
        "    print(json.dumps({'failed': str(exc)}))"))
    assert "needs great_expectations" in facts["failed"] and "[gx]" in facts["failed"], facts


@pytest.mark.integration
def test_a_worker_snapshots_restores_and_reads_a_key_of_an_s3_checkpoint(stack, tmp_path: Path) -> None:  # noqa: ANN001
    from tests.s3 import s3_client

    g = golden(CASE)
    bucket, prefix = stack.s3["primary"]["bucket"], f"tests/worker-{uuid.uuid4().hex[:8]}"
    client = s3_client(stack, "primary")
    local = Path(g.checkpoint)
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        client.upload_file(str(path), bucket, f"{prefix}/ckpt/{path.relative_to(local)}")
    env = stack.s3_env("primary")
    checkpoint, store = f"s3a://{bucket}/{prefix}/ckpt", f"s3://{bucket}/{prefix}/store"
    row = g.state().rows[0]

    created = streamstate(tmp_path, "snapshot", "create", "--checkpoint", checkpoint, "--store", store,
                          "--stream", "agg", "--json", env=env)
    assert created.returncode == 0, created.stderr
    snapshot = json.loads(created.stdout)
    assert snapshot["batch_id"] == g.last_batch and snapshot["files"] > 0

    target = f"s3a://{bucket}/{prefix}/restored"
    restored = streamstate(tmp_path, "restore", "--store", store, "--stream", "agg", snapshot["snapshot_id"],
                           "--target", target, "--json", env=env)
    assert restored.returncode == 0, restored.stderr
    assert json.loads(restored.stdout)["files"] == snapshot["files"]

    for source in (["--store", store, "--stream", "agg", "latest"], ["--checkpoint", target]):
        got = streamstate(tmp_path, "state", "get", *source, "--key", ",".join(map(str, row.key_input)), "--json",
                          env=env)
        assert got.returncode == 0, got.stderr
        hit = json.loads(got.stdout)
        assert hit["found"] and tuple(hit["value"].values()) == row.value and hit["batch_id"] == g.last_batch, hit
