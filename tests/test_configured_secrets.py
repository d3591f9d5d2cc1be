"""Secrets of configured streams stay out of XCom: the DAGs' stream lists carry them as
`***`, and the task that receives such a spec completes it from the configured streams by
name (the Variable, or the run's params) with the real values, masked in its log."""

from __future__ import annotations

import json

import pytest

from airflow_provider_streamstate.configured import configured_streams, stream_spec
from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.spec import StreamSpec

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
