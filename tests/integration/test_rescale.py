"""Rescaling a stateful stream with Spark's own offline repartition (Spark 4.3, the line's own
virtualenv: dev/spark_versions.py), on a verified copy.

The example stream (a deduplication with a watermark and a per-account aggregation, RocksDB
state with changelog checkpointing) runs under the engine's launcher on Spark 4.3 while a
producer writes. A burst of input builds lag; the `streamstate_rescale` DAG confirms it, stops
the stream, rescales its 4 state partitions to 12 (verified key by key, the source snapshot
pinned), restarts it with more cores and watches it catch up; later `streamstate rescale`
shrinks it 12 -> 3 while the producer keeps writing. The stream ends with exactly the
generator's aggregates. A checkpoint in format 2 is rescaled as a clone (production left as
it was) and the clone continues exactly. What cannot work is refused in one line with nothing
changed, and a repartition that Spark itself left unfinished (called directly on HDFS-backed
state) is reported by `verify --checkpoint` and `stream status`, and a restore of the newest
snapshot is the way out."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_streamstate.cli import main
from airflow_provider_streamstate.engine.catalog.retention import pinned_ids
from airflow_provider_streamstate.engine.catalog.snapshots import get_snapshot
from airflow_provider_streamstate.engine.checkpoint.filesystems import open_checkpoint_fs
from airflow_provider_streamstate.engine.checkpoint.liveness import Heartbeat, now_iso, write_heartbeat
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.checkpoint.repartition import read_repartition_record, repartition_at
from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.lookup import lookup_key
from airflow_provider_streamstate.engine.lookup.digest import state_digest
from airflow_provider_streamstate.engine.stores import open_store
from airflow_provider_streamstate.engine.streams import launcher
from airflow_provider_streamstate.jobs.generator import GeneratorSpec, expected_aggregates, produce
from airflow_provider_streamstate.streams.rescale import rescale_spec
from airflow_provider_streamstate.streams.start import start_stream
from dev import spark_versions
from tests.spark_probe import probe
from tests.streams import (
    consumed_records,
    example_stream_spec,
    local_checkpoint_conf,
    use_local_connections,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark_lines]
log = logging.getLogger(__name__)
FORMAT_CONF = "spark.sql.streaming.stateStore.checkpointFormatVersion"


@pytest.fixture(scope="module")
def spark43() -> spark_versions.SparkVersion:
    return spark_versions.get("4.3").require()


@pytest.fixture
def connections(stack: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    use_local_connections(monkeypatch, stack, tmp_path)


def spec_on(line: spark_versions.SparkVersion, stack: Any, topic: str, root: Path, *, name: str = "orders",
            partitions: int = 4, max_offsets: int = 100, trigger: str = "processing:1 second",
            conf: dict[str, str] | None = None) -> Any:
    """The example stream on `line`'s Spark: its spark-submit, Python and Kafka connector."""
    spec = example_stream_spec(stack, topic, root, name=name, state_store="rocksdb-changelog",
                               extra_args=["--shuffle-partitions", str(partitions)])
    given = {"--max-offsets-per-trigger": str(max_offsets), "--trigger": trigger}
    args = [given.get(spec.application_args[i - 1], a) if i else a for i, a in enumerate(spec.application_args)]
    env = {k: v for k, v in line.env({"PATH": os.environ["PATH"]}).items()}
    return spec.derive(application_args=args, jars=line.kafka_jars(), env=env, kafka_conn_id="kafka_local",
                       conf={**spec.conf, **local_checkpoint_conf(line.pyspark), **(conf or {})})


def accounts_exact(checkpoint: str, rounds: list[GeneratorSpec]) -> None:
    """Every account's aggregate in the checkpoint's newest batch, read without Spark, is the
    generator's."""
    expected = expected_aggregates(rounds)
    got = {}
    for account in expected:
        hit = lookup_key(checkpoint, key={"account": account}, operator=0)
        assert hit.found, account
        got[account] = {k: hit.value[k] for k in ("count", "sum", "max")}
    assert got == expected


def test_a_stream_grown_4_to_12_by_the_dag_under_lag_and_shrunk_12_to_3_by_the_cli_continues_exactly(
    stack, topic, tmp_path, connections, spark43, run_dag, capsys
) -> None:
    # At most 40 records a second, in batches of 120 every 3 s: the burst below keeps a lag
    # for as long as at 40 a batch every second, in a third of the batches (each one costs
    # Spark's fixed work per partition, 12 of them after the rescale).
    spec = spec_on(spark43, stack, topic, tmp_path, max_offsets=120, trigger="processing:3 seconds")
    rounds = [GeneratorSpec(seed=61, accounts=30, events=200)]
    produce(stack.kafka_bootstrap, topic, rounds[0])
    try:
        start_stream(spec, startup_timeout_s=600, log=log)
        wait_for(lambda: consumed_records(spec.checkpoint) == 200, timeout=300, what="the first 200 records")

        # A burst the stream takes at least 75 s to read (25 batches of 120): lag builds
        # and stays while the DAG run starts and samples it twice, 15 s apart (1,200 records
        # were read before a loaded machine had the run sampling: 1,800 by its second sample,
        # leaving a lag of 1,200). What is left after the stop is read after the restart.
        rounds.append(rounds[-1].next_round(3000))
        produce(stack.kafka_bootstrap, topic, rounds[-1])
        grown = run_dag("streamstate_rescale", {
            "stream": spec.to_dict(), "partitions": 12, "lag_threshold": 100, "sustained_minutes": 0.2,
            "restart_master": "local[3]", "caught_up_lag": 0})
        assert grown.state == "success", grown.log[-5000:]
        assert grown.tasks["rescale"].state == "success", grown.log[-5000:]  # not skipped: the lag was seen
        rescaled = grown.tasks["rescale"].xcom
        assert (rescaled["from_partitions"], rescaled["to_partitions"], rescaled["in_place"]) == (4, 12, True)
        assert rescaled["spark_version"] == spark43.pyspark
        assert rescaled["seconds"]["verify_digests"] > 0  # verified by the job's executors, compared here
        assert {s["store"] for s in rescaled["stores"]} >= {"default"} and all(s["entries"] for s in rescaled["stores"])
        assert grown.tasks["rollback"].state == "skipped"
        assert grown.tasks["rescaled"].xcom == {k: rescaled[k] for k in (
            "stream", "from_partitions", "to_partitions", "rescaled_snapshot", "pinned")}
        assert grown.tasks["caught_up"].xcom["total_lag"] == 0
        store = open_store(spec.store)
        assert rescaled["pinned"] == rescaled["source_snapshot"] in pinned_ids(store, spec.name)
        labels = get_snapshot(store, spec.name, rescaled["rescaled_snapshot"]).labels
        assert labels == {"rescaled-from": rescaled["source_snapshot"], "partitions": "4->12"}
        repartition = repartition_at(CheckpointReader(spec.checkpoint), rescaled["repartition_batch"])
        assert repartition is not None and (repartition.from_partitions, repartition.to_partitions) == (4, 12)
        assert not Path(spec.checkpoint + ".streamstate-rescale-12").exists()

        # Shrunk by the CLI while the producer writes: stop, rescale, start again.
        rounds.append(rounds[-1].next_round(300))
        producer = threading.Thread(target=lambda: produce(stack.kafka_bootstrap, topic, rounds[-1], rate=100))
        producer.start()
        assert launcher.stop(spec.checkpoint, timeout_s=120).outcome == "stopped"
        spec_file = tmp_path / "orders.json"
        spec_file.write_text(json.dumps(spec.to_dict()))
        assert main(["rescale", "--spec", str(spec_file), "--partitions", "3", "--in-place", "--json"]) == 0
        shrunk = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert (shrunk["from_partitions"], shrunk["to_partitions"]) == (12, 3)
        producer.join()
        start_stream(spec, startup_timeout_s=600, log=log)
        total = sum(r.events for r in rounds)
        wait_for(lambda: consumed_records(spec.checkpoint) == total, timeout=600, what=f"all {total} records")
        assert launcher.stop(spec.checkpoint, timeout_s=120).outcome == "stopped"
    finally:
        launcher.stop(spec.checkpoint, timeout_s=30)
    accounts_exact(spec.checkpoint, rounds)
    assert state_digest(spec.checkpoint).partitions == {0: 3, 1: 3}


def test_a_format_2_checkpoint_rescaled_as_a_clone_verifies_and_the_clone_continues_exactly(
    stack, topic, tmp_path, connections, spark43
) -> None:
    spec = spec_on(spark43, stack, topic, tmp_path, conf={FORMAT_CONF: "2"})
    rounds = [GeneratorSpec(seed=67, accounts=20, events=240)]
    produce(stack.kafka_bootstrap, topic, rounds[0])
    try:
        start_stream(spec, startup_timeout_s=600, log=log)
        wait_for(lambda: consumed_records(spec.checkpoint) == 240, timeout=300, what="240 records")
    finally:
        launcher.stop(spec.checkpoint, timeout_s=60)
    before = state_digest(spec.checkpoint)
    clone = str(tmp_path / "orders-x6")
    result = rescale_spec(spec, 6, target=clone, clone_name="orders-x6")
    assert (result.from_partitions, result.to_partitions, result.in_place, result.pinned) == (4, 6, False, None)
    reader = CheckpointReader(spec.checkpoint)
    assert reader.checkpoint_format(reader.resolve_batch(None)) == 2
    assert state_digest(spec.checkpoint) == before  # production untouched: 4 partitions, the same entries
    assert state_digest(clone).partitions == {0: 6, 1: 6}
    record = read_repartition_record(open_checkpoint_fs(clone))  # what the job's executors computed
    assert record is not None and record.verification is not None and record.verification.ok, record
    # A task per operator, store, partition and batch: 2 operators, 4 partitions at N, 6 at N+1.
    assert record.verification.executors >= 1 and record.verification.tasks >= 2 * (4 + 6)
    assert "verify_digests" in result.seconds
    assert get_snapshot(open_store(spec.store), "orders-x6", result.rescaled_snapshot).labels["source-stream"] == "orders"

    # The clone, with its own sinks, continues exactly over the same input and more.
    clone_spec = spec.derive(name="orders-x6", checkpoint=clone, sinks={"alerts": f"{topic}-x6"})
    rounds.append(rounds[0].next_round(120))
    produce(stack.kafka_bootstrap, topic, rounds[-1])
    try:
        start_stream(clone_spec, startup_timeout_s=600, log=log)
        wait_for(lambda: consumed_records(clone) == 360, timeout=300, what="360 records in the clone")
    finally:
        launcher.stop(clone, timeout_s=60)
    accounts_exact(clone, rounds)

    # A copy whose partitions were swapped by hand holds the same entries in the wrong places:
    # the digest a rescale verifies with says so.
    swapped = tmp_path / "swapped"
    shutil.copytree(clone, swapped)
    for op in ("0", "1"):
        a, b = swapped / "state" / op / "0", swapped / "state" / op / "1"
        a.rename(swapped / "tmp")
        b.rename(a)
        (swapped / "tmp").rename(b)
        (b / "_metadata").rename(a / "_metadata")  # the schema stays where Spark keeps it: partition 0
    for commit in (p for p in (swapped / "commits").iterdir() if p.name.isdigit()):  # format 2: the ids too
        version, body = commit.read_text().split("\n", 1)
        entry = json.loads(body)
        for ids in entry["stateUniqueIds"].values():
            ids[0], ids[1] = ids[1], ids[0]
        commit.write_text(f"{version}\n{json.dumps(entry)}")
    digest = state_digest(str(swapped))
    assert digest.same_entries(state_digest(clone)) == []
    assert digest.misplaced and "Spark looks for it in" in digest.misplaced[0]


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_rescales_that_cannot_work_are_refused_in_one_line_with_nothing_changed(
    stack, topic, tmp_path, connections, spark43, capsys
) -> None:
    """Partitions below 1 or equal to the current number, a running stream in place,
    HDFS-backed state, a checkpoint without operator metadata (begun before Spark 4.0), a
    stream or snapshot of Spark 4.1, and a Spark (the main venv's 4.1) that has no
    repartition: one line, a non-zero exit, the checkpoint and the store as they were."""
    root = tmp_path / "probe"
    (root / "in").mkdir(parents=True)
    (root / "in" / "1.json").write_text("".join(json.dumps({"k": f"k{i % 7}", "v": i}) + "\n" for i in range(40)))
    ckpts = {provider: str(tmp_path / f"ckpt-{provider}") for provider in ("rocksdb", "hdfs")}
    probe(spark43, *(["run", ckpt, str(root), provider, "4"] for provider, ckpt in ckpts.items()))
    store_dir = tmp_path / "store"
    spec = spec_on(spark43, stack, topic, tmp_path, name="probe").derive(store=str(store_dir))
    store = open_store(str(store_dir))
    old = create_snapshot(ckpts["rocksdb"], store, "probe", spark_version="4.1.3").manifest
    bare = tmp_path / "bare"  # the same state without operator metadata, as Spark 3.5 wrote it
    shutil.copytree(ckpts["rocksdb"], bare)
    shutil.rmtree(bare / "state" / "0" / "_metadata")

    def refused(checkpoint: str, *args: str, running: bool = False) -> str:
        spec_file = tmp_path / "spec.json"
        spec_file.write_text(json.dumps(spec.derive(checkpoint=checkpoint).to_dict()))
        if running:
            write_heartbeat(checkpoint, Heartbeat(query_id="q", run_id="r", query_name="probe", host="elsewhere",
                                                  pid=4242, state="running", batch_id=0, input_rows=0,
                                                  updated_at=now_iso(), interval_s=60.0))
        tree, ids = _tree(Path(checkpoint)), store.list_snapshot_ids("probe")
        capsys.readouterr()  # the CLI's output alone (an earlier test's Airflow logging may print here)
        code = main(["rescale", "--spec", str(spec_file), *args])
        err = capsys.readouterr().err.strip()
        assert code != 0 and err.count("\n") == 0, err
        assert _tree(Path(checkpoint)) == tree and store.list_snapshot_ids("probe") == ids
        assert not any(p.name.endswith(".streamstate-rescale-8") for p in tmp_path.iterdir())
        return err

    assert "cannot rescale to 0 partitions" in refused(ckpts["rocksdb"], "--partitions", "0", "--in-place")
    assert "has 4 state partitions already" in refused(ckpts["rocksdb"], "--partitions", "4", "--in-place")
    assert "HDFS-backed state" in refused(ckpts["hdfs"], "--partitions", "8", "--in-place")
    assert "begun before Spark 4.0" in refused(str(bare), "--partitions", "8", "--in-place")
    assert "runs Spark 4.1.3" in refused(ckpts["rocksdb"], "--partitions", "8", "--snapshot", old.snapshot_id,
                                         "--target", str(tmp_path / "clone"))
    main41 = spark_versions.get(spark_versions.MAIN_LINE)
    spec = spec.derive(env=main41.env({"PATH": os.environ["PATH"]}))  # the Spark that runs it: 4.1
    fresh = create_snapshot(ckpts["rocksdb"], store, "probe", always=True).manifest  # no version recorded
    assert fresh.spark_version is None
    assert "has no offline state repartition" in refused(ckpts["rocksdb"], "--partitions", "8", "--snapshot",
                                                         fresh.snapshot_id, "--target", str(tmp_path / "clone"))
    assert not (tmp_path / "clone").exists()
    assert "stop it before rescaling it in place" in refused(ckpts["rocksdb"], "--partitions", "8", "--in-place",
                                                             running=True)


def test_a_repartition_spark_left_unfinished_is_reported_and_a_restore_is_the_way_out(
    tmp_path, spark43, capsys
) -> None:
    """Spark's API called directly on HDFS-backed state writes the repartition batch's offsets
    and fails (STATE_REPARTITION_INVALID_CHECKPOINT.UNSUPPORTED_PROVIDER): Spark will not start
    the query on it again. A snapshot still cuts at the last committed batch, and its restore
    starts."""
    root = tmp_path / "probe"
    (root / "in").mkdir(parents=True)
    (root / "in" / "1.json").write_text("".join(json.dumps({"k": f"k{i % 5}", "v": i}) + "\n" for i in range(25)))
    ckpt = str(tmp_path / "ckpt")
    _, failed = probe(spark43, ["run", ckpt, str(root), "hdfs", "4"], ["repartition", ckpt, "8"])
    assert not failed["ok"] and "UNSUPPORTED_PROVIDER" in failed["error"]
    store = open_store(str(tmp_path / "store"))
    snap = create_snapshot(ckpt, store, "probe").manifest
    assert main(["verify", "--store", str(tmp_path / "store"), "--stream", "probe", "--checkpoint", ckpt]) == 1
    err = capsys.readouterr().err
    assert f"batch {snap.batch_id + 1} repartitioned the state 4 -> 8, not committed" in err
    assert main(["stream", "status", "--checkpoint", ckpt, "--json"]) == 0
    assert "not committed" in json.loads(capsys.readouterr().out)["checkpoint_problem"]

    restore_snapshot(store, "probe", snap.snapshot_id, ckpt, force=True)
    (root / "in" / "2.json").write_text(json.dumps({"k": "k0", "v": 1000}) + "\n")
    _, state = probe(spark43, ["run", ckpt, str(root), "hdfs", "4"], ["state", ckpt])
    assert state["k0"] == [6, sum(range(0, 25, 5)) + 1000]


def test_a_transform_with_state_stream_rescaled_keeps_its_value_and_list_state_and_continues_exactly(
    stack, topic, tmp_path, connections, spark43, capsys
) -> None:
    """transformWithStateInPandas (a value state and a list state, RocksDB) rescaled 4 -> 8
    as a clone: Spark writes each list back in one piece (no ',' between its elements, unlike
    merged appends); the verification, Spark's state reader and the engine's lookups see the
    same lists in the same order, and the clone continues exactly on Spark 4.3."""
    root, ckpt, clone = tmp_path / "tws", str(tmp_path / "ckpt-tws"), str(tmp_path / "tws-x8")
    (root / "in").mkdir(parents=True)
    files = [[(f"k{i % 30}", i) for i in range(60)], [(f"k{20 + i % 30}", 100 + i) for i in range(60)],
             [(f"k{45 + i % 15}", 1000 + i) for i in range(30)]]

    def write(n: int) -> None:  # one file a batch, in the order of their times
        path = root / "in" / f"{n}.json"
        path.write_text("".join(json.dumps({"k": k, "v": v}) + "\n" for k, v in files[n - 1]))
        os.utime(path, (1_700_000_000 + n, 1_700_000_000 + n))

    write(1)
    write(2)
    assert probe(spark43, ["run", ckpt, str(root), "tws", "4"])[0]["batch"] == 1  # file 1, then file 2
    spec = spec_on(spark43, stack, topic, tmp_path, name="tws").derive(checkpoint=ckpt, store=str(tmp_path / "store"))
    spec_file = tmp_path / "tws.json"
    spec_file.write_text(json.dumps(spec.to_dict()))
    code = main(["rescale", "--spec", str(spec_file), "--partitions", "8", "--target", clone,
                 "--clone-name", "tws-x8", "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    result = json.loads(out)
    assert (result["from_partitions"], result["to_partitions"]) == (4, 8)
    assert {s["store"] for s in result["stores"]} >= {"default/seen", "default/total"}
    assert state_digest(clone).partitions == {0: 8}

    def sorted_state(answer: dict[str, list[int]]) -> dict[str, list[int]]:
        return {k: sorted(v) for k, v in answer.items()}

    clone_seen, clone_total, seen, total = probe(
        spark43, ["state", clone, "seen"], ["state", clone, "total"], ["state", ckpt, "seen"], ["state", ckpt, "total"])
    assert sorted_state(clone_seen) == sorted_state(seen) and sorted_state(clone_total) == sorted_state(total)
    for key in ("k5", "k25", "k49"):  # the first file only, both, the second only
        before = lookup_key(ckpt, key={"k": key}, state_var="seen")
        after = lookup_key(clone, key={"k": key}, state_var="seen")
        assert after.found and after.value == before.value, key
        assert [r["v"] for r in after.value] == [v for f in files[:2] for k, v in f if k == key]

    write(3)
    _, seen, total = probe(spark43, ["run", clone, str(root), "tws", "4"], ["state", clone, "seen"],
                           ["state", clone, "total"])  # the clone continues: 8 partitions from here
    expected: dict[str, list[int]] = {}
    for f in files:
        for k, v in f:
            expected.setdefault(k, []).append(v)
    assert sorted_state(seen) == {k: sorted(v) for k, v in expected.items()}
    assert sorted_state(total) == {k: [len(v)] for k, v in expected.items()}
    assert [r["v"] for r in lookup_key(clone, key={"k": "k50"}, state_var="seen").value] == expected["k50"]
