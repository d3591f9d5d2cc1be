"""Helpers for tests that run the example stream: state as dicts, and an oracle that
recomputes the expected state from Kafka itself, up to given offsets."""

from __future__ import annotations

import json
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from airflow_provider_streamstate.jobs.runtime import read_state


def account_state(spark: Any, checkpoint: str, batch_id: int | None = None) -> dict[str, dict[str, int]]:
    """Operator 0 (per-account count/sum/max) of the `accounts` query at `batch_id`."""
    rows = read_state(spark, checkpoint, operatorId=0, batchId=batch_id).collect()
    return {r.key.account: r.value.asDict() for r in rows}


def dedup_keys(spark: Any, checkpoint: str, batch_id: int | None = None) -> set[str]:
    """Operator 1 (deduplication) of the `accounts` query: the transaction ids it remembers."""
    rows = read_state(spark, checkpoint, operatorId=1, batchId=batch_id).collect()
    return {r.key.txn_id for r in rows}


def consume_until(bootstrap: str, offsets: dict[str, dict[str, int]]) -> list[dict[str, Any]]:
    """Every message of each topic-partition before the given end offsets, decoded."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "oracle", "enable.auto.commit": False})
    want = {(t, int(p)): o for t, ps in offsets.items() for p, o in ps.items() if o > 0}
    consumer.assign([TopicPartition(t, p, 0) for (t, p) in want])
    out: list[dict[str, Any]] = []
    done: set[tuple[str, int]] = set()
    idle = 0
    while len(done) < len(want) and idle < 30:
        msgs = consumer.consume(1000, timeout=1.0)
        idle = 0 if msgs else idle + 1
        for m in msgs:
            if m.error():
                continue
            key = (m.topic(), m.partition())
            if m.offset() < want[key]:
                out.append(json.loads(m.value()))
            if m.offset() >= want[key] - 1:
                done.add(key)
    consumer.close()
    assert len(done) == len(want), f"could not read up to {offsets}"
    return out


def oracle_state(bootstrap: str, offsets: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """What per-account state must be after consuming exactly up to `offsets`."""
    seen: set[str] = set()
    out: dict[str, dict[str, int]] = {}
    for t in consume_until(bootstrap, offsets):
        if t["txn_id"] in seen:
            continue
        seen.add(t["txn_id"])
        agg = out.setdefault(t["account"], {"count": 0, "sum": 0, "max": 0})
        agg["count"] += 1
        agg["sum"] += t["amount_cents"]
        agg["max"] = max(agg["max"], t["amount_cents"])
    return out


def use_state_store(spark: Any, state_store: str, **extra: str) -> None:
    """Set the session confs a new query pins at batch 0 (provider, snapshot cadence...)."""
    from airflow_provider_streamstate.jobs.runtime import state_store_confs

    confs = {"spark.sql.streaming.stateStore.minDeltasForSnapshot": "3", "spark.sql.shuffle.partitions": "4"}
    for key, value in {**state_store_confs(state_store), **confs, **extra}.items():
        spark.conf.set(key, value)


def run_to_end(spark: Any, bootstrap: str, topic: str, checkpoint: str, *, max_offsets: int = 200, **kw: Any) -> int:
    """Run the `accounts` query with available-now until it drains `topic`; last batch id."""
    from airflow_provider_streamstate.jobs.example_stream import StreamArgs, start_query

    args = StreamArgs(bootstrap, checkpoint, source_topic=topic, alerts_topic=f"{topic}-alerts",
                      trigger="available-now", max_offsets_per_trigger=max_offsets, **kw)
    query = start_query(spark, args)
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    return int(query.lastProgress["batchId"])
