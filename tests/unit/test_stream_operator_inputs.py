"""What the stream operators decide before anything runs: a clone that could write where
production does is refused (shared or nested sinks, production's checkpoint or sinks
hard-coded in its arguments), and the spark-submit command comes from the `spark`
connection (utils/spark_submit.py), with the spec's master over the connection's and the
supervised wrapper in front of the application."""

from __future__ import annotations

import json
import sys

import pytest

from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.engine.streams.launcher import ENV_CHECKPOINT, supervised_application
from airflow_provider_streamstate.operators.stream import clone_conflicts
from airflow_provider_streamstate.spec import StreamSpec
from airflow_provider_streamstate.streams.start import stream_command

PROD = StreamSpec(
    name="orders", checkpoint="/data/orders", store="file:///store", application="/jobs/orders.py",
    application_args=["--checkpoint", "{checkpoint}", "--alerts-topic", "{sinks[alerts]}"],
    sinks={"alerts": "orders-alerts", "archive": "/lake/orders"},
)


def clone(**changes: object) -> StreamSpec:
    base = {"name": "orders-sandbox", "checkpoint": "/sandbox/orders",
            "sinks": {"alerts": "sandbox-alerts", "archive": "/sandbox/lake"}}
    return PROD.derive(**{**base, **changes})


def test_a_clone_with_its_own_sinks_and_checkpoint_is_allowed() -> None:
    assert clone_conflicts(PROD, clone()) == []


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"sinks": {"alerts": "orders-alerts", "archive": "/sandbox/lake"}}, "sink alerts=orders-alerts is production's alerts"),
        ({"sinks": {"alerts": "sandbox-alerts", "archive": "/lake/orders/sandbox"}}, "sink archive=/lake/orders/sandbox is production's archive"),
        ({"checkpoint": "/data/orders"}, "its checkpoint /data/orders overlaps production's"),
        ({"application_args": ["--checkpoint", "{checkpoint}", "--alerts-topic", "orders-alerts"]},
         "its arguments name production's sink alerts=orders-alerts"),
        ({"application_args": ["--checkpoint", "/data/orders"]}, "its arguments name production's checkpoint"),
        ({"name": "orders"}, "the production stream's name"),
    ],
)
def test_a_clone_that_could_write_into_production_is_refused(changes: dict, problem: str) -> None:
    problems = clone_conflicts(PROD, clone(**changes))
    assert any(problem in p for p in problems), problems


def test_the_command_takes_the_connections_master_and_wraps_the_application(monkeypatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_TEST", json.dumps({"conn_type": "spark", "host": "local[3]"}))
    spec = PROD.derive(spark_conn_id="spark_test", conf={"spark.ui.enabled": "false"}, jars=["/j/a.jar", "/j/b.jar"],
                       env={"TZ": "UTC"})
    command, env = stream_command(spec)
    assert command[command.index("--master") + 1] == "local[3]"
    assert command[command.index("--jars") + 1] == "/j/a.jar,/j/b.jar"
    assert "spark.ui.enabled=false" in command and command[command.index("--name") + 1] == "orders"
    wrapper = command.index(supervised_application())
    assert command[wrapper + 1:] == ["/jobs/orders.py", "--checkpoint", "/data/orders", "--alerts-topic", "orders-alerts"]
    assert env["TZ"] == "UTC" and env.get("PYSPARK_DRIVER_PYTHON", sys.executable) and ENV_CHECKPOINT not in env

    command, _ = stream_command(spec.derive(master="local[1]"))
    assert command[command.index("--master") + 1] == "local[1]"


def test_a_missing_spark_connection_without_a_master_is_refused_with_a_hint() -> None:
    with pytest.raises(UsageError, match="connection 'no_such_spark' does not exist") as refused:
        stream_command(PROD.derive(spark_conn_id="no_such_spark"))
    assert "AIRFLOW_CONN_NO_SUCH_SPARK" in refused.value.one_line() and "or set the stream's master" in refused.value.one_line()
    command, _ = stream_command(PROD.derive(spark_conn_id="no_such_spark", master="local[2]"))
    assert command[command.index("--master") + 1] == "local[2]"


def test_on_kill_kills_a_driver_that_is_still_starting(tmp_path) -> None:
    import time

    from airflow_provider_streamstate.engine.streams import launcher
    from airflow_provider_streamstate.operators.stream import StartStreamOperator

    checkpoint = tmp_path / "ckpt"
    op = StartStreamOperator(task_id="start", stream=PROD.derive(checkpoint=str(checkpoint)).to_dict())
    op._starting = launcher.launch([sys.executable, "-c", "import time; time.sleep(120)"], stream="orders",
                                   checkpoint=checkpoint)
    started = time.monotonic()
    op.on_kill()
    assert time.monotonic() - started < 15
    assert launcher.status(checkpoint).state == "dead"


@pytest.mark.parametrize(("connection", "ship_code", "shipped"), [
    ({"host": "yarn", "extra": {"deploy-mode": "cluster"}}, None, True),  # the driver on the cluster
    ({"host": "yarn", "extra": {"deploy-mode": "client"}}, None, False),  # a driver here: this Python has it
    ({"host": "spark://h:7077"}, None, False),
    ({"host": "local[2]"}, None, False),
    ({"host": "yarn", "extra": {"deploy-mode": "cluster"}}, False, False),  # the cluster's Python has it
    ({"host": "yarn", "extra": {"deploy-mode": "client"}}, True, True),
    # Kubernetes takes a local py-file in cluster mode only with an upload path
    ({"host": "k8s://https://k:443", "extra": {"deploy-mode": "cluster"}}, None, False),
    ({"host": "k8s://https://k:443", "extra": {"deploy-mode": "cluster"}, "upload": True}, None, True),
])
def test_a_streams_driver_gets_this_packages_code_where_it_runs_on_the_cluster(
    monkeypatch, connection, ship_code, shipped
) -> None:
    upload = connection.pop("upload", False)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_TEST", json.dumps({"conn_type": "spark", **connection}))
    monkeypatch.setenv("STREAMSTATE_HOME", "/tmp/streamstate-test-home")
    conf = {"spark.kubernetes.file.upload.path": "s3a://uploads/spark"} if upload else {}
    command, _ = stream_command(PROD.derive(spark_conn_id="spark_test", ship_code=ship_code, conf=conf))
    py_files = command[command.index("--py-files") + 1].split(",") if "--py-files" in command else []
    assert bool(py_files) is shipped
    if shipped:
        assert py_files[0].rsplit("/", 1)[-1].startswith("streamstate-code-")
    assert command.index(supervised_application()) > (command.index("--py-files") if shipped else 0)
