"""The spark-submit command a `spark` connection gives (utils/spark_submit.py), built without the
apache-spark provider as its SparkSubmitHook builds it, and which spark-submit runs it
(engine/streams/submission.py): the connection's spark-binary as a path, else SPARK_HOME's,
else the PATH's, else the one pyspark ships; none of them is one line saying how to give one."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pytest

from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.engine.streams.submission import resolve_spark_submit
from airflow_provider_streamstate.utils.spark_submit import spark_submit_command


def connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, value: dict | str) -> str:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", value if isinstance(value, str) else json.dumps(value))
    return conn_id


def fake_spark_submit(folder: Path, name: str = "spark-submit") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / name
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_a_yarn_connection_gives_its_queue_deploy_mode_principal_and_the_drivers_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("STREAMSTATE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SPARK_HOME", str(fake_spark_submit(tmp_path / "spark" / "bin").parent.parent))
    keytab = base64.b64encode(b"KEYTAB-BYTES").decode()
    conn = connection(monkeypatch, "spark_yarn", {"conn_type": "spark", "host": "yarn", "extra": {
        "deploy-mode": "cluster", "queue": "streams", "principal": "etl@REALM", "keytab": keytab}})
    command, env = spark_submit_command("/jobs/app.py", conn_id=conn, application_args=["--x", "1"], name="orders",
                                        conf={"spark.ui.enabled": "false"}, jars=["/j/a.jar", "/j/b.jar"],
                                        env={"TZ": "UTC"})
    assert command[0] == str(tmp_path / "spark" / "bin" / "spark-submit")
    assert option(command, "--master") == "yarn" and option(command, "--deploy-mode") == "cluster"
    assert option(command, "--queue") == "streams" and option(command, "--principal") == "etl@REALM"
    assert Path(option(command, "--keytab")).read_bytes() == b"KEYTAB-BYTES"
    assert stat.S_IMODE(Path(option(command, "--keytab")).stat().st_mode) == 0o600
    assert "spark.yarn.appMasterEnv.TZ=UTC" in command and "spark.ui.enabled=false" in command
    assert option(command, "--jars") == "/j/a.jar,/j/b.jar" and option(command, "--name") == "orders"
    assert command[-3:] == ["/jobs/app.py", "--x", "1"] and env["TZ"] == "UTC"


def test_a_kubernetes_connection_from_a_uri_gives_its_master_and_namespace(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SPARK_HOME", str(fake_spark_submit(tmp_path / "spark" / "bin").parent.parent))
    conn = connection(monkeypatch, "spark_k8s", {"conn_type": "k8s", "host": "https://api.example", "port": 6443,
                                                 "extra": {"namespace": "streams"}})
    command, _ = spark_submit_command("/jobs/app.py", conn_id=conn, application_args=[], name="orders",
                                      env={"TZ": "UTC"}, deploy_mode="cluster")
    assert option(command, "--master") == "k8s://https://api.example:6443"
    assert "spark.kubernetes.namespace=streams" in command and "spark.kubernetes.driverEnv.TZ=UTC" in command
    assert option(command, "--deploy-mode") == "cluster"


def test_the_callers_master_wins_and_without_a_connection_it_is_the_whole_answer(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SPARK_HOME", str(fake_spark_submit(tmp_path / "spark" / "bin").parent.parent))
    conn = connection(monkeypatch, "spark_standalone", {"conn_type": "spark", "host": "spark://m", "port": 7077})
    command, _ = spark_submit_command("/a.py", conn_id=conn, application_args=[], name="n")
    assert option(command, "--master") == "spark://m:7077"
    command, _ = spark_submit_command("/a.py", conn_id=conn, application_args=[], name="n", master="local[1]")
    assert option(command, "--master") == "local[1]"
    command, _ = spark_submit_command("/a.py", conn_id="no_such_spark", application_args=[], name="n",
                                      master="local[2]")
    assert option(command, "--master") == "local[2]"
    with pytest.raises(UsageError, match="connection 'no_such_spark' does not exist") as refused:
        spark_submit_command("/a.py", conn_id="no_such_spark", application_args=[], name="n")
    assert "AIRFLOW_CONN_NO_SUCH_SPARK" in refused.value.one_line()


def test_an_environment_for_a_standalone_driver_in_cluster_mode_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    conn = connection(monkeypatch, "spark_standalone", {"conn_type": "spark", "host": "spark://m:7077",
                                                        "extra": {"deploy-mode": "cluster"}})
    with pytest.raises(UsageError, match="cannot reach it on spark://m:7077 in cluster mode"):
        spark_submit_command("/a.py", conn_id=conn, application_args=[], name="n", env={"TZ": "UTC"})


def test_the_connections_spark_binary_as_a_path_is_run_as_given(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    exe = fake_spark_submit(tmp_path / "opt" / "spark3" / "bin", "spark3-submit")
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "elsewhere"))  # not looked at: the path is explicit
    conn = connection(monkeypatch, "spark_path", {"conn_type": "spark", "host": "yarn",
                                                  "extra": {"spark-binary": str(exe)}})
    command, _ = spark_submit_command("/a.py", conn_id=conn, application_args=[], name="n")
    assert command[0] == str(exe)


def test_spark_home_comes_before_the_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    on_path = fake_spark_submit(tmp_path / "path-bin")
    home = fake_spark_submit(tmp_path / "spark" / "bin").parent.parent
    env = {"PATH": str(on_path.parent), "SPARK_HOME": str(home)}
    assert resolve_spark_submit(["spark-submit", "a.py"], env)[0][0] == str(home / "bin" / "spark-submit")
    monkeypatch.delenv("SPARK_HOME", raising=False)
    command, out = resolve_spark_submit(["spark-submit", "a.py"], {"PATH": str(on_path.parent)})
    assert command[0] == "spark-submit" and "SPARK_HOME" not in out


def test_the_connections_spark_binary_name_is_looked_for_in_spark_home(tmp_path: Path) -> None:
    home = fake_spark_submit(tmp_path / "spark" / "bin", "spark3-submit").parent.parent
    command, _ = resolve_spark_submit(["spark3-submit", "a.py"], {"SPARK_HOME": str(home), "PATH": ""})
    assert command[0] == str(home / "bin" / "spark3-submit")


def test_a_spark_home_without_the_binary_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=f"SPARK_HOME={tmp_path} has no bin/spark-submit") as refused:
        resolve_spark_submit(["spark-submit", "a.py"], {"SPARK_HOME": str(tmp_path)})
    assert "unset it" in refused.value.one_line()


def test_without_spark_home_or_the_path_the_spark_submit_pyspark_ships_runs_with_its_home(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pyspark = pytest.importorskip("pyspark")
    monkeypatch.delenv("SPARK_HOME", raising=False)
    command, env = resolve_spark_submit(["spark-submit", "a.py"], {"PATH": ""})
    home = os.path.dirname(pyspark.__file__)
    assert command[0] == os.path.join(home, "bin", "spark-submit") and env["SPARK_HOME"] == home


def test_no_spark_anywhere_is_one_line_naming_the_ways_to_give_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_HOME", raising=False)
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)  # this Python without pyspark
    with pytest.raises(UsageError, match="no spark-submit here") as refused:
        resolve_spark_submit(["spark-submit", "a.py"], {"PATH": ""})
    line = refused.value.one_line()
    assert "SPARK_HOME" in line and "spark-binary" in line and "airflow-provider-streamstate[spark]" in line


@pytest.mark.parametrize("value", [
    {"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster", "queue": "q", "principal": "p@R"}},
    {"conn_type": "spark", "host": "spark://m", "port": 7077},
    {"conn_type": "spark", "host": "local[2]"},
    {"conn_type": "spark", "host": "yarn", "extra": {"spark-binary": "spark3-submit"}},
], ids=["yarn-cluster", "standalone", "local", "binary"])
def test_the_command_is_the_one_the_providers_hook_builds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                          value: dict) -> None:
    """Where the apache-spark provider is installed (the repository's .venv: 5.x), its hook
    builds the same command for the same connection and arguments."""
    hooks = pytest.importorskip("airflow.providers.apache.spark.hooks.spark_submit")
    home = tmp_path / "spark"
    for name in ("spark-submit", "spark3-submit"):
        fake_spark_submit(home / "bin", name)
    monkeypatch.setenv("SPARK_HOME", str(home))
    conn = connection(monkeypatch, "spark_same", value)
    args = {"conf": {"spark.ui.enabled": "false"}, "name": "orders", "env": {"TZ": "UTC"}}
    ours, _ = spark_submit_command("/jobs/app.py", conn_id=conn, application_args=["--x"], jars=["/a.jar"], **args)
    hook = hooks.SparkSubmitHook(conn_id=conn, conf=args["conf"], name="orders", jars="/a.jar", env_vars=args["env"],
                                 application_args=["--x"])
    theirs = hook._build_spark_submit_command("/jobs/app.py")  # noqa: SLF001 - the parity checked here
    assert Path(ours[0]).name == theirs[0] and ours[1:] == theirs[1:]
