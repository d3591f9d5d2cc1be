"""A state digest is the sum of its store partitions' digests, computed anywhere: on an
HDFS-backed aggregation written byte by byte as Spark writes it, the digest is the sum of the
hashes of the entries it holds whether one process or several worker processes compute it;
a key in the wrong partition is named (and only where placement is checked); an unreadable
partition is named, and raised by `state_digest`; `repartition_problems` turns two digests
into the list a rescale refuses on; the repartition job's record round-trips; and how other
processes reach a checkpoint (`Reach`) pickles without showing its secrets."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import xxhash

from airflow_provider_streamstate.backends.hdfs.webhdfs import WebHdfsAccess
from airflow_provider_streamstate.backends.s3.clients import S3Access
from airflow_provider_streamstate.engine.checkpoint.filesystems import open_checkpoint_fs
from airflow_provider_streamstate.engine.checkpoint.repartition import (
    RepartitionRecord,
    Verification,
    read_repartition_record,
    write_repartition_record,
)
from airflow_provider_streamstate.engine.core.errors import CorruptionError, UsageError
from airflow_provider_streamstate.engine.lookup.digest import (
    StateDigest,
    combine,
    repartition_problems,
    run_plan,
    state_digest,
)
from airflow_provider_streamstate.engine.lookup.digest_tasks import plan_digest
from airflow_provider_streamstate.engine.lookup.digest_workers import run_in_workers
from airflow_provider_streamstate.engine.lookup.encodings.unsafe_row import encode_row
from airflow_provider_streamstate.engine.lookup.reading.reach import Reach
from tests.unit.state_files import KEY, VALUE, Aggregation, lz4_stream, records

KEYS = {f"acct-{i}": i % 17 for i in range(600)}


@pytest.fixture
def aggregation(tmp_path: Path) -> Aggregation:
    agg = Aggregation(tmp_path / "ckpt", partitions=4)
    agg.commit(dict(list(KEYS.items())[:400]))
    agg.commit({**dict(list(KEYS.items())[400:]), "acct-3": None, "acct-5": None})  # two keys removed
    return agg


def expected_fingerprint(state: dict[str, int]) -> tuple[int, str]:
    total = 0
    for k, n in state.items():
        key, value = encode_row([k], KEY), encode_row([n], VALUE)
        total += xxhash.xxh3_128_intdigest(len(key).to_bytes(4, "little") + key + value)
    return len(state), f"{total % (1 << 128):032x}"


def test_the_digest_sums_every_entry_the_same_in_one_process_and_in_worker_processes(aggregation) -> None:
    state = {k: n for k, n in KEYS.items() if k not in ("acct-3", "acct-5")}
    one = state_digest(str(aggregation.root), workers=1)
    several = state_digest(str(aggregation.root), workers=3)
    assert one == several
    (store,) = one.stores
    assert (store.entries, store.fingerprint) == expected_fingerprint(state)
    assert store.placement_checked and one.placement and one.placed == len(state)
    assert (one.misplaced, one.misplaced_keys, one.unreadable) == ((), 0, ())
    first = state_digest(str(aggregation.root), 0, workers=2)
    assert (first.stores[0].entries, first.stores[0].fingerprint) == expected_fingerprint(dict(list(KEYS.items())[:400]))
    assert StateDigest.from_json(one.to_json()) == one


def test_a_key_in_the_wrong_partition_is_named_where_placement_is_checked(aggregation) -> None:
    wrong = next(p for p in range(4) if p != aggregation.partition("intruder"))
    root = aggregation.root
    delta = root / f"state/0/{wrong}/3.delta"
    b = aggregation.commit({})
    assert b == 2
    delta.write_bytes(lz4_stream(records((encode_row(["intruder"], KEY), encode_row([1], VALUE)))))
    found = state_digest(str(root), workers=1)
    assert found.misplaced_keys == 1
    assert found.misplaced == (f"operator 0 store default: key {{'k': 'intruder'}} is in partition {wrong}, "
                               f"Spark looks for it in {aggregation.partition('intruder')}",)
    unchecked = state_digest(str(root), placement=False)
    assert (unchecked.misplaced, unchecked.placed, unchecked.placement) == ((), 0, False)
    assert unchecked.stores[0].fingerprint == found.stores[0].fingerprint
    assert not unchecked.stores[0].placement_checked


def test_an_unreadable_partition_is_named_by_the_digest_and_raised_by_state_digest(aggregation) -> None:
    damaged = aggregation.root / "state/0/2/2.delta"
    damaged.write_bytes(damaged.read_bytes()[:-9])
    plan = plan_digest(str(aggregation.root))
    digest = combine(plan, run_plan(plan, str(aggregation.root), workers=1))
    assert len(digest.unreadable) == 1
    assert digest.unreadable[0].startswith("operator 0 store default partition 2: ") and "2.delta" in digest.unreadable[0]
    with pytest.raises(CorruptionError, match="2.delta"):
        state_digest(str(aggregation.root))


def test_repartition_problems_name_what_a_rescale_refuses(aggregation) -> None:
    root = str(aggregation.root)
    before = state_digest(root, 0, placement=False)
    after = state_digest(root, 1)
    same = StateDigest(after.source, before.batch_id + 1, after.partitions, before.stores, placed=10)
    assert repartition_problems(before, same, 4) == []
    problems = repartition_problems(before, after, 8)
    assert problems == ["operator 0 store default: 400 entries in "
                        f"checkpoint {root} at batch 0, 598 in checkpoint {root} at batch 1",
                        "the repartitioned state has [4] partitions, not 8"]
    unplaced = StateDigest(after.source, 1, after.partitions, before.stores, placement=False,
                           unreadable=("operator 0 store default partition 1: gone",))
    assert repartition_problems(before, unplaced, 4) == [
        "batch 1: operator 0 store default partition 1: gone",
        "the partitions of the keys of batch 1 were not checked"]
    misplaced = StateDigest(after.source, 3, after.partitions, before.stores, misplaced=("key x ...",), misplaced_keys=5)
    assert repartition_problems(before, misplaced, 4) == [
        "the digests are of batches 0 and 3, not of a batch and the repartition batch after it", "key x ...",
        "4 more keys of batch 3 are not in the partition Spark looks for them in"]


def test_a_task_no_worker_could_finish_is_left_to_the_caller(aggregation) -> None:
    plan = plan_digest(str(aggregation.root))
    results: list = []
    left = run_in_workers(plan.tasks, Reach(), 2, results.append)
    assert (len(results), left) == (len(plan.tasks), [])
    unreachable = Reach(WebHdfsAccess((), "nobody", 1.0, ""))  # no NameNode: the worker cannot open it and dies
    left = run_in_workers(plan.tasks[:2], unreachable, 1, results.append)
    assert left == list(plan.tasks[:2])  # the one it was running, and the one no other worker took


def test_the_repartition_record_round_trips_beside_the_checkpoint(aggregation) -> None:
    fs = open_checkpoint_fs(str(aggregation.root))
    assert read_repartition_record(fs) is None
    digest = state_digest(str(aggregation.root)).to_json()
    v = Verification(("a problem",), digest, digest, 8, 2, {"plan": 0.1, "digests": 2.0})
    record = RepartitionRecord(True, "4.3.0", 8, 2, 12.5, verification=v)
    write_repartition_record(fs, record)
    back = read_repartition_record(fs)
    assert back == record and back is not None and back.verification is not None and not back.verification.ok
    assert Verification((), digest, digest, 8, 2).ok and not Verification((), None, None, 0, 0).ok
    fs.write_record("_streamstate/repartition.json", b'{"format": "elsewhere/v9"}')
    with pytest.raises(CorruptionError, match="not a repartition record"):
        read_repartition_record(fs)


def test_a_reach_pickles_and_opens_the_same_connection_without_showing_its_secrets() -> None:
    conf = {"spark.hadoop.fs.s3a.bucket.ckpt.endpoint": "http://127.0.0.1:9000",
            "spark.hadoop.fs.s3a.bucket.ckpt.access.key": "AK", "spark.hadoop.fs.s3a.bucket.ckpt.secret.key": "SECRET",
            "spark.hadoop.fs.s3a.endpoint": "s3.example.net", "spark.hadoop.fs.s3a.access.key": "GK",
            "spark.hadoop.fs.s3a.secret.key": "GS", "spark.hadoop.fs.s3a.connection.ssl.enabled": "false"}
    per_bucket = Reach.from_spark_conf(conf.get, "s3a://ckpt/streams/orders")
    assert per_bucket.access == S3Access("http://127.0.0.1:9000", None, "AK", "SECRET", None)
    assert "SECRET" not in repr(per_bucket) and pickle.loads(pickle.dumps(per_bucket)) == per_bucket
    other = Reach.from_spark_conf(conf.get, "s3://other/x")
    assert other.access == S3Access("http://s3.example.net", None, "GK", "GS", None)
    assert Reach.from_spark_conf({}.get, "s3a://ckpt/x") == Reach() == Reach.from_spark_conf(conf.get, "/local/ckpt")
    client = per_bucket.connection()
    again = Reach.of(client, "s3a://ckpt/streams/orders").access
    assert client.meta.endpoint_url == "http://127.0.0.1:9000" and again is not None
    assert (again.endpoint_url, again.access_key, again.secret_key) == ("http://127.0.0.1:9000", "AK", "SECRET")
    assert Reach.of(None, "s3a://ckpt/x") == Reach()
    with pytest.raises(UsageError, match="cannot hand a"):
        Reach.of(object(), "s3a://ckpt/x")
