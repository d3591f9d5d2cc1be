"""Secrets of configured streams stay out of XCom: the DAGs' stream lists carry them as
`***`, and the task that receives such a spec completes it from the configured streams by
name (the Variable, or the run's params) with the real values, masked in its log."""

from __future__ import annotations

import json

import pytest

from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.spec import StreamSpec
from airflow_provider_streamstate.utils.configured_streams import configured_streams, stream_spec

SPEC = {"name": "orders", "checkpoint": "/data/ckpt/orders", "store": "/data/store",
        "application": "/opt/jobs/orders.py", "application_args": ["--sasl-password", "app-secret-3"],
        "conf": {"spark.hadoop.fs.s3a.secret.key": "conf-secret-1", "spark.ui.enabled": "false"},
        "env": {"AWS_SECRET_ACCESS_KEY": "env-secret-2", "AWS_REGION": "eu-west-1"}}


@pytest.fixture
def configured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_VAR_STREAMSTATE_STREAMS", json.dumps([SPEC]))


def test_the_stream_list_a_dag_passes_on_holds_no_secret(configured: None) -> None:
    listed = configured_streams(None)
    text = json.dumps(listed)
    for secret in ("conf-secret-1", "env-secret-2", "app-secret-3"):
        assert secret not in text
    assert listed[0]["conf"] == {"spark.hadoop.fs.s3a.secret.key": "***", "spark.ui.enabled": "false"}
    assert listed[0]["env"]["AWS_REGION"] == "eu-west-1"
    assert listed[0]["application_args"] == ["--sasl-password", "***"]


def test_a_task_given_the_redacted_spec_works_with_the_real_one(configured: None) -> None:
    redacted = configured_streams(None)[0]
    assert StreamSpec.from_value(redacted).is_redacted()
    assert stream_spec(redacted) == StreamSpec.from_value(SPEC)


def test_a_redacted_spec_of_a_stream_nobody_configured_is_refused_by_name(configured: None) -> None:
    other = StreamSpec.from_value({**SPEC, "name": "payments"}).redacted()
    with pytest.raises(UsageError, match="stream payments comes with its secrets redacted and is not among"):
        stream_spec(other.to_dict())


def test_a_whole_spec_is_used_as_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW_VAR_STREAMSTATE_STREAMS", raising=False)
    assert stream_spec(SPEC) == StreamSpec.from_value(SPEC)


@pytest.mark.parametrize("command", [["stream", "start"], ["stream", "supervise"]])
def test_the_spark_submit_command_the_provider_logs_at_info_shows_no_secret(command: list[str], tmp_path) -> None:  # noqa: ANN001
    """The spark-submit command is logged at INFO (Airflow's default level); on YARN in
    cluster mode the spec's env becomes `spark.yarn.appMasterEnv.*` confs in that command.
    The project's redaction applies to what it logs: a conf named `*api_key*` and an env
    entry named `*TOKEN*` show as `***`. (With no YARN configuration the launch is refused after the command is built;
    supervise builds it to restart a driver that died on this host.)"""
    import os
    import socket
    import subprocess
    import sys

    from airflow_provider_streamstate.engine.streams.records import LaunchRecord, StreamHandle, launch_path

    if command[1] == "supervise":
        dead = subprocess.Popen(["true"])
        dead.wait()
        handle = StreamHandle("acc", str(tmp_path / "ckpt"), "L-1", dead.pid, socket.gethostname(), "",
                              "2026-01-01T00:00:00Z", generation=1)
        record = tmp_path / "ckpt" / launch_path(1)
        record.parent.mkdir(parents=True)
        record.write_bytes(LaunchRecord(handle, ["spark-submit", "acc.py"], dead.pid, None).to_json())

    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({
        "name": "acc", "application": "/opt/jobs/acc.py", "application_args": ["--checkpoint", "{checkpoint}"],
        "checkpoint": str(tmp_path / "ckpt"), "store": str(tmp_path / "store"), "master": "yarn",
        "deploy_mode": "cluster", "conf": {"spark.acc.api_key": "k-SEKRIT-1"}, "env": {"ACC_API_TOKEN": "t-SEKRIT-2"}}))
    env = {k: v for k, v in os.environ.items() if k not in ("HADOOP_CONF_DIR", "YARN_CONF_DIR")}
    out = subprocess.run(
        [sys.executable, "-m", "airflow_provider_streamstate.cli", "--verbose", *command, "--spec", str(spec)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**env, "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO", "STREAMSTATE_HOME": str(tmp_path / "home")})
    logged = out.stdout + out.stderr
    assert "spark-submit command:" not in out.stdout, out.stdout  # stdout is the command's result alone
    assert out.returncode != 0 and "needs the cluster's configuration" in out.stderr, logged
    assert "spark-submit command:" in logged and "spark.acc.api_key=***" in logged, logged
    assert "spark.yarn.appMasterEnv.ACC_API_TOKEN=***" in logged, logged
    assert "SEKRIT" not in logged
