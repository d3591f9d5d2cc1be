"""Clone expiry end to end: CloneStreamOperator makes a clone that writes to its own Kafka
topic, with a short ttl and delete_sinks_on_expiry; ExpireClonesOperator, in the same DAG
run, finds it from its record in the store and deletes its checkpoint, its snapshots and
its topic on the stack's broker (through the Airflow kafka connection), and the record."""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka.admin import AdminClient

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.streams.clones import list_clones
from airflow_provider_streamstate.jobs.generator import ensure_topic
from airflow_provider_streamstate.spec import StreamSpec
from tests.unit.fake_checkpoint import make_checkpoint, store_dirs, write

pytestmark = pytest.mark.integration


def test_an_expired_clone_loses_its_checkpoint_snapshots_and_topic(stack, run_dag, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_STACK", json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": stack.kafka_bootstrap}}))
    ckpt = make_checkpoint(tmp_path / "prod", batches=2)
    for d in store_dirs(ckpt):
        write(d / "1.delta", "a")
        write(d / "2.delta", "b")
    store = LocalStore(tmp_path / "store", fsync=False)
    create_snapshot(str(ckpt), store, "orders")
    clone_topic = f"sandbox-alerts-{uuid.uuid4().hex[:8]}"
    ensure_topic(stack.kafka_bootstrap, clone_topic, partitions=1)
    spec = StreamSpec(name="orders", checkpoint=str(ckpt), store=store.url, kafka_conn_id="kafka_stack",
                      sinks={"alerts": "orders-alerts"})
    clone_ckpt = tmp_path / "sandbox"
    result = run_dag("streamstate_test_clone_expiry", {
        "stream": spec.to_dict(), "clone_checkpoint": str(clone_ckpt), "clone_sinks": {"alerts": clone_topic}})
    assert result.state == "success", result.log[-3000:]
    dry = result.tasks["dry_run"].xcom
    assert dry["dry_run"] and dry["expired"][0]["topics_deleted"] == [clone_topic]
    done = result.tasks["expire_clones"].xcom["expired"]
    assert [(e["clone"], e["checkpoint_deleted"], e["topics_deleted"]) for e in done] == [
        ("orders-sandbox", True, [clone_topic])]
    assert not clone_ckpt.exists()
    assert list_clones(store) == []
    topics = AdminClient({"bootstrap.servers": stack.kafka_bootstrap}).list_topics(timeout=10).topics
    assert clone_topic not in topics
