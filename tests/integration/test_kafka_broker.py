"""The local broker is a real Kafka: topics with partitions, produce and consume."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from airflow_provider_streamstate.jobs.generator import GeneratorSpec, produce, transactions

pytestmark = pytest.mark.integration


def test_topic_is_created_with_the_requested_partitions(stack, topic) -> None:
    md = AdminClient({"bootstrap.servers": stack.kafka_bootstrap}).list_topics(timeout=10)
    assert len(md.topics[topic].partitions) == 3


def test_produced_transactions_are_consumed_back_in_full(stack, topic) -> None:
    spec = GeneratorSpec(seed=11, accounts=7, events=300)
    assert produce(stack.kafka_bootstrap, topic, spec) == 300

    consumer = Consumer(
        {"bootstrap.servers": stack.kafka_bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
    got: dict[str, dict] = {}
    partitions_by_account: dict[str, set[int]] = {}
    for _ in range(200):
        for msg in consumer.consume(num_messages=500, timeout=1.0):
            assert msg.error() is None
            value = json.loads(msg.value())
            got[value["txn_id"]] = value
            partitions_by_account.setdefault(value["account"], set()).add(msg.partition())
        if len(got) >= 300:
            break
    consumer.close()
    assert {t.txn_id: t.amount_cents for t in transactions(spec)} == {k: v["amount_cents"] for k, v in got.items()}
    # Keyed by account: all of one account's transactions land in one partition.
    assert all(len(p) == 1 for p in partitions_by_account.values())
    assert len(set().union(*partitions_by_account.values())) > 1
