"""Hooks turn Airflow connections into engine objects: an S3 store from an `aws`
connection (endpoint and credentials from the connection, never from code), and broker
offsets from an apache-kafka `kafka` connection. Unknown connections fail in one line."""

from __future__ import annotations

import json

import pytest

from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.jobs.generator import GeneratorSpec, produce

pytestmark = pytest.mark.integration


def test_the_store_hook_opens_an_s3_store_from_an_aws_connection(stack, monkeypatch) -> None:
    from airflow_provider_streamstate.hooks.store import StreamstateStoreHook

    for key in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(key, raising=False)
    for key, value in stack.airflow_conn_env("dr", "s3_dr").items():
        monkeypatch.setenv(key, value)
    hook = StreamstateStoreHook("s3://streamstate/hooks-test", storage_conn_id="s3_dr", parallelism=4)
    ok, message = hook.test_connection()
    assert ok, message
    assert hook.store.client.meta.endpoint_url == stack.s3["dr"]["endpoint_url"]
    assert hook.store.client.meta.config.max_pool_connections == 8

    missing = StreamstateStoreHook("s3://streamstate/x", storage_conn_id="no_such_conn")
    with pytest.raises(UsageError, match="'no_such_conn' does not exist"):
        _ = missing.store
    assert missing.test_connection()[0] is False


def test_the_kafka_hook_reads_broker_offsets_from_a_kafka_connection(stack, topic, monkeypatch) -> None:
    from airflow_provider_streamstate.hooks.kafka import StreamKafkaHook

    produce(stack.kafka_bootstrap, topic, GeneratorSpec(seed=2, accounts=3, events=30))
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_TEST", json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": stack.kafka_bootstrap}}))
    parts = StreamKafkaHook(kafka_config_id="kafka_test").broker_offsets({topic: {"0": 0, "1": 0, "2": 0}})
    assert sum(p.latest for p in parts) == 30 and all(p.earliest == 0 for p in parts)

    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_EMPTY", json.dumps({"conn_type": "kafka", "extra": {}}))
    with pytest.raises(UsageError, match="no bootstrap.servers"):
        StreamKafkaHook(kafka_config_id="kafka_empty").client_config()
