"""A real stream's history as state you can see and trust: one `accounts` stream over a
real broker, snapshotted at every batch, with one poison transaction (an amount no card
allows) produced at a known offset. Each snapshot's state equals Spark's own state data
source on the original checkpoint; diff agrees with the states compared in Python; bisect
names exactly the first snapshot whose offsets include the poison, within ceil(log2 N) + 1
validations, and a second run validates nothing; the CLI says the same, in one line when
the input is wrong."""

from __future__ import annotations

import json
import math
import uuid
from pathlib import Path

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.cli import main
from airflow_provider_streamstate.engine.catalog.snapshots import resolve_snapshot
from airflow_provider_streamstate.engine.catalog.validation_records import get_validation
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.state.bisect import bisect_snapshots
from airflow_provider_streamstate.engine.state.diff import diff_snapshots
from airflow_provider_streamstate.engine.state.reader import (
    StateReader,
    StateSelector,
    checkpoint_state,
    flatten_state,
)
from airflow_provider_streamstate.engine.state.spark import read_state
from airflow_provider_streamstate.engine.state.validation import load_suite
from airflow_provider_streamstate.jobs.generator import START_MS, GeneratorSpec, ensure_topic, produce
from tests.streams import run_to_end, use_state_store

pytestmark = pytest.mark.integration

POISON_ACCOUNT = "acct-00003"
SUITE = {
    "name": "accounts-sane",
    "meta": {"streamstate": {"operator": "stateStoreSave"}},
    "expectations": [
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "key_account"}},
        {"type": "expect_column_values_to_be_between", "kwargs": {"column": "value_max", "min_value": 1,
                                                                  "max_value": 100000}},
        {"type": "expect_column_values_to_be_between", "kwargs": {"column": "value_count", "min_value": 1}},
    ],
}


def produce_poison(bootstrap: str, topic: str, index: int) -> int:
    """One transaction of 10,000,000.00 on partition 0; its offset."""
    from confluent_kafka import Producer

    offsets: list[int] = []
    producer = Producer({"bootstrap.servers": bootstrap})
    body = {"txn_id": "poison-1", "account": POISON_ACCOUNT, "amount_cents": 10**9, "ts_ms": START_MS + index * 1000}
    producer.produce(topic, json.dumps(body).encode(), partition=0, on_delivery=lambda err, msg: offsets.append(msg.offset()))
    producer.flush(30)
    assert len(offsets) == 1
    return offsets[0]


class History:
    def __init__(self, root: Path, store: LocalStore, checkpoint: str, topic: str, manifests: list, poison_offset: int):
        self.root, self.store, self.checkpoint, self.topic = root, store, checkpoint, topic
        self.manifests, self.poison_offset = manifests, poison_offset

    @property
    def ids(self) -> list[str]:
        return [m.snapshot_id for m in self.manifests]

    def first_with_poison(self) -> int:
        return next(i for i, m in enumerate(self.manifests) if m.kafka_offsets[self.topic]["0"] > self.poison_offset)


@pytest.fixture(scope="module")
def history(stack, spark, tmp_path_factory) -> History:
    root = tmp_path_factory.mktemp("state-history")
    topic = f"poison-{uuid.uuid4().hex[:8]}"
    ensure_topic(stack.kafka_bootstrap, topic, partitions=2)
    use_state_store(spark, "rocksdb-changelog", **{"spark.sql.shuffle.partitions": "2"})
    first = GeneratorSpec(seed=81, accounts=8, events=90)
    produce(stack.kafka_bootstrap, topic, first)
    poison_offset = produce_poison(stack.kafka_bootstrap, topic, 90)
    produce(stack.kafka_bootstrap, topic, first.next_round(90))
    checkpoint = str(root / "ckpt")
    run_to_end(spark, stack.kafka_bootstrap, topic, checkpoint, max_offsets=30)
    store = LocalStore(root / "store")
    batches = CheckpointReader(checkpoint).committed_batches()
    manifests = [create_snapshot(checkpoint, store, "accounts", batch_id=b).manifest for b in batches]
    h = History(root, store, checkpoint, topic, manifests, poison_offset)
    assert 0 < h.first_with_poison() < len(manifests) - 1, [m.kafka_offsets for m in manifests]
    return h


@pytest.fixture(scope="module")
def reader(history, spark, tmp_path_factory):  # noqa: ANN201
    with StateReader(history.store, spark=spark, workdir=tmp_path_factory.mktemp("materialised")) as r:
        yield r


def rows(df) -> list[tuple]:  # noqa: ANN001
    return sorted(tuple(r) for r in df.collect())


def test_each_snapshots_state_equals_sparks_state_source_on_the_original_checkpoint(history, reader, spark) -> None:
    picks = sorted({0, history.first_with_poison(), len(history.manifests) - 1})
    for i in picks:
        m = history.manifests[i]
        aggregates = reader.state("accounts", m.snapshot_id, StateSelector(operator="stateStoreSave"))
        assert aggregates.columns == ["key_account", "value_count", "value_sum", "value_max", "partition_id"]
        raw = read_state(spark, history.checkpoint, operatorId=0, batchId=m.batch_id).collect()
        assert raw, "the aggregation holds state"
        assert rows(aggregates) == sorted(
            (r.key.account, r.value["count"], r.value["sum"], r.value["max"], r.partition_id) for r in raw)
        assert rows(aggregates) == rows(checkpoint_state(spark, history.checkpoint, batch_id=m.batch_id))
        dedup = reader.state("accounts", m.snapshot_id, StateSelector(operator=1))
        assert dedup.columns[0] == "key_txn_id"
        original = flatten_state(read_state(spark, history.checkpoint, operatorId=1, batchId=m.batch_id))
        assert rows(dedup) == rows(original) and rows(dedup)
        meta = reader.metadata("accounts", m.snapshot_id)
        assert meta.operators == {0: "stateStoreSave", 1: "dedupeWithinWatermark"}
        assert {s.max_batch_id for s in meta.stores} == {m.batch_id}
        assert {s.partitions for s in meta.stores} == {2}
    assert reader.materialised == len(picks)  # once per snapshot, whatever was read of it


def test_diff_of_two_snapshots_agrees_with_the_states_compared_in_python(history, reader) -> None:
    a, b = history.manifests[1], history.manifests[-1]

    def state(m) -> dict:  # noqa: ANN001
        df = reader.state("accounts", m.snapshot_id)
        return {r.key_account: (r.value_count, r.value_sum, r.value_max) for r in df.collect()}

    sa, sb = state(a), state(b)
    d = diff_snapshots(reader, "accounts", a.snapshot_id, b.snapshot_id, sample=3)
    assert d.key_columns == ["key_account"]
    assert d.counts == {
        "added": len(sb.keys() - sa.keys()),
        "removed": len(sa.keys() - sb.keys()),
        "changed": sum(1 for k in sa.keys() & sb.keys() if sa[k] != sb[k]),
        "unchanged": sum(1 for k in sa.keys() & sb.keys() if sa[k] == sb[k]),
    }
    assert d.counts["changed"] > 0
    for s in d.samples["changed"]:
        k = s["key"]["key_account"]
        assert (s["before"]["value_count"], s["after"]["value_count"]) == (sa[k][0], sb[k][0])
    assert diff_snapshots(reader, "accounts", b.snapshot_id, b.snapshot_id).identical


def test_a_diff_with_one_sample_per_kind_counts_the_same_in_one_pass(history, reader) -> None:
    """sample=1 is one bucket per kind: the same counts, and for each kind found the smallest
    key, which is also the first of five samples."""
    a, b = history.manifests[0], history.manifests[-1]
    full = diff_snapshots(reader, "accounts", a.snapshot_id, b.snapshot_id, sample=5)
    one = diff_snapshots(reader, "accounts", a.snapshot_id, b.snapshot_id, sample=1)
    assert one.counts == full.counts and full.counts["changed"] > 0
    assert one.samples == {kind: full.samples[kind][:1] for kind in full.samples}


def test_a_one_pass_diff_samples_the_smallest_key_of_every_kind(spark) -> None:
    """Added keys have no A side (its key columns are null in the join): their sample is
    still the smallest of B's keys, and the other kinds' the smallest of A's."""
    from airflow_provider_streamstate.engine.state.diff import diff_states

    a = spark.createDataFrame([(k, k * 10) for k in (5, 3, 9, 7, 1)], "key_k long, value_v long")
    b = spark.createDataFrame([(k, k * 10 + (k > 5)) for k in (5, 9, 7, 1, 12, 11)], "key_k long, value_v long")
    full, one = diff_states(a, b, sample=5), diff_states(a, b, sample=1)
    assert full.counts == one.counts == {"added": 2, "removed": 1, "changed": 2, "unchanged": 2}
    assert {kind: [s["key"]["key_k"] for s in one.samples[kind]] for kind in one.samples} == {
        "added": [11], "removed": [3], "changed": [7], "unchanged": [1]}
    assert one.samples == {kind: full.samples[kind][:1] for kind in full.samples}


def test_a_diff_samples_the_smallest_keys_of_distinct_buckets_and_shows_a_small_kind_whole(spark) -> None:
    """Samples come from the counting aggregate (the smallest key of each hash bucket): a
    large kind gives `sample` of its keys, sorted, its smallest first; a kind with no more
    keys than `sample` is shown whole even when two of its keys fell in one bucket."""
    from pyspark.sql import functions as F

    from airflow_provider_streamstate.engine.state.diff import diff_states

    sample = 2
    buckets = {r.k: r.b for r in spark.range(400).select(
        F.col("id").alias("k"), F.pmod(F.xxhash64(F.col("id")), F.lit(64 * sample)).alias("b")).collect()}
    k1 = next(k for k in range(100, 400) if buckets[k] == buckets[99])  # 99 and k1 share a bucket
    a = spark.createDataFrame([(k, k) for k in range(400)], "key_k long, value_v long")
    # Removed: 0-49 (a large kind); changed: exactly 99 and k1 (a small kind, one bucket).
    b = spark.createDataFrame([(k, k + (k in (99, k1))) for k in range(50, 400)], "key_k long, value_v long")
    d = diff_states(a, b, sample=sample)
    assert d.counts == {"added": 0, "removed": 50, "changed": 2, "unchanged": 348}
    assert [s["key"]["key_k"] for s in d.samples["changed"]] == [99, k1]
    removed = [s["key"]["key_k"] for s in d.samples["removed"]]
    assert len(removed) == sample and removed == sorted(removed) and removed[0] == 0 and set(removed) <= set(range(50))
    assert [s["before"]["value_v"] for s in d.samples["changed"]] == [99, k1]
    assert diff_states(a, b, sample=0).samples == {"added": [], "removed": [], "changed": [], "unchanged": []}


def test_bisect_names_the_first_snapshot_holding_the_poison_and_reuses_its_results(history, reader, tmp_path) -> None:
    suite_file = tmp_path / "suite.json"
    suite_file.write_text(json.dumps(SUITE))
    suite = load_suite(suite_file)
    n = len(history.manifests)
    r = bisect_snapshots(reader, "accounts", suite)
    expected = history.first_with_poison()
    assert r.first_bad.snapshot_id == history.ids[expected]
    assert r.last_good.snapshot_id == history.ids[expected - 1]
    assert 1 <= r.validations <= math.ceil(math.log2(n)) + 1, r.to_json()["steps"]
    # The input window where the poison entered: between the two snapshots' offsets.
    out = r.to_json()
    assert out["last_good_kafka_offsets"][history.topic]["0"] <= history.poison_offset < out["kafka_offsets"][history.topic]["0"]
    assert out["batch_id"] == history.manifests[expected].batch_id
    assert not r.assumption_violated
    failed = get_validation(history.store, "accounts", r.first_bad.snapshot_id, "accounts-sane").failed
    assert [(o.type, o.kwargs["column"]) for o in failed] == [("expect_column_values_to_be_between", "value_max")]
    assert failed[0].observed["partial_unexpected_list"] == [10**9]
    assert resolve_snapshot(history.store, "accounts", "latest-good:accounts-sane").snapshot_id == r.last_good.snapshot_id

    again = bisect_snapshots(reader, "accounts", suite)
    assert again.validations == 0
    assert again.first_bad.snapshot_id == r.first_bad.snapshot_id


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_cli_validates_shows_exports_bisects_and_lists_validation_status(history, tmp_path, capsys) -> None:
    store = f"file://{history.store.root}"
    suite_file = tmp_path / "suite.json"
    suite_file.write_text(json.dumps({**SUITE, "name": "accounts-cli"}))
    bad = history.ids[history.first_with_poison()]
    code, out, _ = cli(capsys, "validate", "--store", store, "--stream", "accounts", bad, "--suite", str(suite_file),
                       "--data-docs", str(tmp_path / "docs"), "--json")
    result = json.loads(out)
    assert code == 3
    assert (result["snapshot_id"], result["suite"], result["success"], result["evaluated"]) == (bad, "accounts-cli", False, 3)
    assert [(f["type"], f["observed"]["partial_unexpected_list"]) for f in result["failed"]] == [
        ("expect_column_values_to_be_between", [10**9])]
    assert Path(result["data_docs"]).is_file()
    code, out, _ = cli(capsys, "validate", "--store", store, "--stream", "accounts", history.ids[0],
                       "--suite", str(suite_file))
    assert code == 0 and out.startswith("PASS suite accounts-cli passed on")

    code, out, _ = cli(capsys, "bisect", "--store", store, "--stream", "accounts", "--suite", str(suite_file), "--json")
    result = json.loads(out)
    assert code == 0 and result["first_bad"] == bad and result["last_good"] == history.ids[history.first_with_poison() - 1]
    assert result["batch_id"] == int(bad[:12]) and history.topic in result["kafka_offsets"]
    assert result["validations"] <= math.ceil(math.log2(len(history.ids))) + 1 and result["steps"]

    code, out, _ = cli(capsys, "state", "show", "--store", store, "--stream", "accounts", "latest",
                       "--where", "value_max > 100000", "--json")
    shown = json.loads(out)
    assert code == 0 and [r["key_account"] for r in shown["rows"]] == [POISON_ACCOUNT] and shown["total_rows"] == 1
    code, out, _ = cli(capsys, "state", "show", "--store", store, "--stream", "accounts", "latest-good:accounts-cli",
                       "--operator", "dedupeWithinWatermark", "--limit", "2")
    assert code == 0 and "key_txn_id" in out.splitlines()[1] and "(2 of " in out

    target = tmp_path / "export"
    code, out, _ = cli(capsys, "state", "export", "--store", store, "--stream", "accounts", "latest", "--format", "jsonl",
                       "--output", str(target), "--json")
    exported = [json.loads(line) for f in sorted(target.glob("part-*")) for line in f.read_text().splitlines()]
    assert code == 0 and len(exported) == json.loads(out)["rows"] > 0
    assert {"key_account", "value_count", "value_sum", "value_max", "partition_id"} == set(exported[0])

    code, out, _ = cli(capsys, "diff", "--store", store, "--stream", "accounts", history.ids[0], "latest", "--json")
    assert code == 0 and json.loads(out)["changed"] > 0

    code, out, _ = cli(capsys, "snapshot", "list", "--store", store, "--stream", "accounts", "--json")
    listed = {r["snapshot_id"]: r["validations"] for r in json.loads(out)}
    assert listed[bad]["accounts-cli"] is False and listed[history.ids[0]]["accounts-cli"] is True


def test_bad_input_to_the_cli_is_one_clear_line(history, tmp_path, capsys) -> None:
    store = f"file://{history.store.root}"
    base = ["--store", store, "--stream", "accounts"]
    suite_file = tmp_path / "suite.json"
    suite_file.write_text(json.dumps(SUITE))
    other = create_snapshot(history.checkpoint, history.store, "payments", new_timeline=True).manifest.snapshot_id
    broken = tmp_path / "broken.json"
    broken.write_text('{"name": "x", "expectations": [')
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({"name": "x", "expectations": [{"type": "expect_state_to_be_nice", "kwargs": {}}]}))
    cases = [
        (["validate", *base, "latest", "--suite", str(tmp_path / "nope.json")], 2, "does not exist"),
        (["validate", *base, "latest", "--suite", str(broken)], 2, "is not valid JSON"),
        (["validate", *base, "latest", "--suite", str(unknown)], 2, "unknown expectation type 'expect_state_to_be_nice'"),
        (["state", "show", *base, "latest", "--operator", "9"], 1, "has no stateful operator 9; operators there: 0 (stateStoreSave), 1 (dedupeWithinWatermark)"),
        (["state", "show", *base, other], 1, f"{other}"),
        (["state", "show", *base, "latest", "--where", "no_such_column > 1"], 2, "is not a valid filter"),
    ]
    for argv, code, words in cases:
        got, out, err = cli(capsys, *argv)
        assert (got, out) == (code, ""), (argv, err)
        assert err.count("\n") == 1 and err.startswith("streamstate: error: ") and words in err, (argv, err)
