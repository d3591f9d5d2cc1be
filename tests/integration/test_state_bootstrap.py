"""A stream moved from another engine: its state, a table of 100,000 accounts' aggregates
(as a Parquet file, named as the state reader names columns), is bootstrapped into a new
checkpoint for the example stream's query (RocksDB with changelog, shaped as a checkpoint
the query wrote on one record of its own), starting at the Kafka offsets up to which the
table is current; StateBootstrapOperator (what `streamstate state bootstrap` runs too:
streams/edit.py's bootstrap_spec; the CLI's own face is tests/unit/test_edit_cli.py)
verifies it and has Spark's state reader (in the spec's Spark) read it. The stream then starts on it, reads only the records after
those offsets, and ends with the table's aggregates plus exactly what it read."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.edit.spark_check import SPARK_KEYS
from airflow_provider_streamstate.engine.kafka.offsets import broker_offsets
from airflow_provider_streamstate.engine.lookup import lookup_key
from airflow_provider_streamstate.jobs.generator import GeneratorSpec, expected_aggregates, produce
from airflow_provider_streamstate.operators.edit import StateBootstrapOperator
from tests.streams import example_stream_spec, run_to_end, use_state_store

pytestmark = pytest.mark.integration
KEYS = 100_000


def merged(a: dict[str, int], b: dict[str, int] | None) -> dict[str, int]:
    return a if b is None else {"count": a["count"] + b["count"], "sum": a["sum"] + b["sum"],
                                "max": max(a["max"], b["max"])}


def test_a_table_of_100000_keys_is_bootstrapped_and_the_stream_continues_from_the_given_offsets_exactly(
        stack, spark, topic, tmp_path, monkeypatch) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_LOCAL", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    use_state_store(spark, "rocksdb-changelog")
    spec = example_stream_spec(stack, topic, tmp_path, name="moved", state_store="rocksdb-changelog")

    # The query's shape: it runs once on a record of its own.
    skeleton = str(tmp_path / "skeleton")
    produce(stack.kafka_bootstrap, f"{topic}-shape", GeneratorSpec(seed=3, accounts=1, events=1))
    run_to_end(spark, stack.kafka_bootstrap, f"{topic}-shape", skeleton)

    # The history the other engine processed: the table sums it up (and 100,000 accounts
    # more that this topic never saw), current up to the topic's end offsets now.
    history = GeneratorSpec(seed=97, accounts=12, events=240)
    produce(stack.kafka_bootstrap, topic, history)
    seen = expected_aggregates([history])
    rnd = random.Random(11)
    table = {f"old-{i:06d}": {"count": (c := rnd.randint(1, 50)), "sum": c * rnd.randint(1, 1000),
                              "max": rnd.randint(1000, 100_000)} for i in range(KEYS - len(seen))}
    table.update(seen)
    rows = [{"key_account": a, "value_count": v["count"], "value_sum": v["sum"], "value_max": v["max"]}
            for a, v in table.items()]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "table.parquet")
    ends = {str(p.partition): p.latest for p in broker_offsets(stack.kafka_bootstrap, {topic: {"0": 0, "1": 0, "2": 0}})}
    assert sum(ends.values()) == 240

    task = StateBootstrapOperator(task_id="bootstrap", stream=spec.to_dict(), skeleton=skeleton,
                                  table=str(tmp_path / "table.parquet"), offsets=json.dumps([{topic: ends}]))
    done = json.loads(json.dumps(task.execute({})))  # what XCom keeps
    assert done["keys"] == KEYS and done["source_offsets"] == [{topic: ends}]
    # Spark read every entry of the store, and a spread sample of the keys one by one.
    assert done["spark"]["keys_checked"] == SPARK_KEYS and done["spark"]["entries"]["0/default"] == KEYS
    assert CheckpointReader(spec.checkpoint).committed_batches() == [0]

    # The stream starts on it: it reads only what came after the table, once.
    more = history.next_round(120)
    produce(stack.kafka_bootstrap, topic, more)
    run_to_end(spark, stack.kafka_bootstrap, topic, spec.checkpoint)
    after = expected_aggregates([more])
    for account in [*seen, *after, "old-000000", f"old-{KEYS - len(seen) - 1:06d}"]:
        hit = lookup_key(spec.checkpoint, key={"account": account}, operator=0)
        want = merged(table[account], after.get(account)) if account in table else after[account]
        assert hit.found and {k: hit.value[k] for k in ("count", "sum", "max")} == want, account
    sample: dict[str, Any] = dict(rnd.sample(sorted(table.items()), 50))
    for account, want in sample.items():
        hit = lookup_key(spec.checkpoint, key={"account": account}, operator=0)
        assert {k: hit.value[k] for k in ("count", "sum", "max")} == merged(want, after.get(account)), account
