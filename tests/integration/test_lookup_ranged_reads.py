"""Key lookups read what one key needs, on state written by real Spark.

RocksDB tables written with the confs a user can set (`spark.sql.streaming.stateStore.rocksdb.
compression` zstd, snappy, none; a 1 KiB `blockSizeKB`; `formatVersion` 4 and 6) are read
right: every key Spark's state reader shows is found with its value, near misses are not.
From a snapshot in an S3 store (moto) a cold lookup sends ranged GETs: the zip whole, then per
table its tail (footer, metaindex, properties, index, filter) and at most one data block,
never the whole table; a partition ten times larger costs the same number of requests and
data blocks. HDFS-backed state is read newest file first and stops at the file that decides
the key: a key written by the last batch costs its newest delta only, fewer bytes than the
partition holds, over a checkpoint and over an S3 snapshot alike."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.lookup import (
    CheckpointSource,
    PartitionCache,
    SnapshotSource,
    lookup_key,
)
from airflow_provider_streamstate.engine.state.spark import read_state, state_store_confs

pytestmark = [pytest.mark.integration, pytest.mark.hdfs]

ROCKS = "spark.sql.streaming.stateStore.rocksdb."
TAIL_READ = 32 << 10


@contextmanager
def confs(spark: Any, values: dict[str, str]) -> Iterator[None]:
    before = {k: spark.conf.get(k, None) for k in values}
    for k, v in values.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


def aggregate(spark: Any, checkpoint: str, *, keys: int, rows: int, batches: int, store: str = "rocksdb",
              extra: dict[str, str] | None = None) -> None:
    """count and sum per `account-<n>` over `keys` accounts, `rows` rows a batch, until
    batch `batches` committed (a noop sink), with `extra` state store confs."""
    from pyspark.sql import functions as F

    settings = {**state_store_confs(store), "spark.sql.shuffle.partitions": "2",
                "spark.sql.streaming.stateStore.minDeltasForSnapshot": "100", **(extra or {})}
    with confs(spark, settings):
        df = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows).load()
              .select(F.concat(F.lit("account-"), (F.col("value") % keys).cast("string")).alias("account"),
                      F.col("value"))
              .groupBy("account").agg(F.count("*").alias("n"), F.sum("value").alias("total")))
        q = df.writeStream.format("noop").outputMode("update").option("checkpointLocation", checkpoint).start()
        deadline = time.monotonic() + 600
        try:
            while not q.lastProgress or q.lastProgress["batchId"] < batches:
                assert q.exception() is None, q.exception()
                assert time.monotonic() < deadline, "the query did not reach its batches"
                time.sleep(0.2)
        finally:
            q.stop()


def spark_state(spark: Any, checkpoint: str) -> dict[str, tuple[int, dict[str, Any]]]:
    """account -> (partition, value) as Spark's state reader shows it."""
    rows = read_state(spark, checkpoint).collect()
    return {r.key.account: (r.partition_id, {"n": r.value["count"], "total": r.value["sum"]}) for r in rows}


def agrees_with_spark(spark: Any, checkpoint: str, source: Any = None, sample: int = 400) -> int:
    state = spark_state(spark, checkpoint)
    assert state, checkpoint
    src = source or CheckpointSource(checkpoint)
    rnd = random.Random(5)
    for account in rnd.sample(sorted(state), min(sample, len(state))):
        hit = lookup_key(src, key={"account": account})
        partition, value = state[account]
        assert (hit.found, hit.partition) == (True, partition), account
        assert {"n": hit.value["count"], "total": hit.value["sum"]} == value, account
        miss = lookup_key(src, key={"account": account + "~"})
        assert not miss.found
    return len(state)


@pytest.mark.parametrize("settings", [{ROCKS + "compression": "zstd"}, {ROCKS + "compression": "snappy"},
                                      {ROCKS + "compression": "none"}, {ROCKS + "blockSizeKB": "1"},
                                      {ROCKS + "formatVersion": "4"}, {ROCKS + "formatVersion": "6"}],
                         ids=["zstd", "snappy", "none", "1KiB-blocks", "format-4", "format-6"])
def test_tables_of_every_compression_block_size_and_format_spark_writes_are_read_right(
        spark, tmp_path: Path, settings: dict[str, str]) -> None:
    checkpoint = str(tmp_path / "agg")
    aggregate(spark, checkpoint, keys=3000, rows=4000, batches=2, extra=settings)
    assert agrees_with_spark(spark, checkpoint) == 3000


class GetCounter:
    """The GetObject requests an S3 client sends: (key, Range header or None)."""

    def __init__(self, client: Any) -> None:
        self.gets: list[tuple[str, str | None]] = []
        client.meta.events.register("before-call.s3.GetObject", self._seen)

    def _seen(self, params: dict[str, Any], **_: Any) -> None:
        self.gets.append((params.get("url_path", ""), params.get("headers", {}).get("Range")))

    def clear(self) -> None:
        self.gets.clear()


def cold_lookup(store: Any, account: str, counter: GetCounter) -> tuple[Any, list[tuple[str, str | None]]]:
    """A lookup with nothing cached; the GETs it sent once its snapshot's manifest was read."""
    src = SnapshotSource(store, "agg", "latest")
    counter.clear()
    hit = lookup_key(src, key={"account": account}, cache=PartitionCache())
    return hit, list(counter.gets)


def test_a_cold_lookup_in_an_s3_snapshot_sends_ranged_gets_and_a_larger_partition_costs_the_same_blocks(
        spark, tmp_path: Path, make_store) -> None:
    from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot

    results = {}
    for name, keys in (("small", 20_000), ("large", 200_000)):
        checkpoint = str(tmp_path / name)
        aggregate(spark, checkpoint, keys=keys, rows=keys, batches=1)
        store, _, _ = make_store("s3")
        m = create_snapshot(checkpoint, store, "agg").manifest
        counter = GetCounter(store.client)
        account = "account-4711"
        hit, gets = cold_lookup(store, account, counter)
        assert hit.found
        sizes = {e.path: e.size for e in m.files}
        partition_bytes = sum(s for p, s in sizes.items() if p.startswith(f"state/0/{hit.partition}/"))
        tables = [p for p in hit.files_read if p.endswith(".sst")]
        ranged = [g for g in gets if g[1] is not None]
        whole = [g for g in gets if g[1] is None]
        # Whole GETs: the operator's schema and the partition's zip; every table by ranges.
        assert len(whole) == 2 and len(ranged) == hit.requests - 2
        blocks = [r for r in ranged if not _opens_table(r, m)]
        assert len(blocks) <= len(tables)  # at most one data block per table consulted
        assert all(_length(r) < TAIL_READ for r in blocks)
        assert hit.bytes_read < partition_bytes
        results[name] = (hit, blocks, partition_bytes, tables)
    small, large = results["small"], results["large"]
    assert large[2] > 5 * small[2]  # the partition grew (RocksDB compresses the repeated key prefix)
    assert len(large[1]) == len(small[1]), (large[1], small[1])  # the same number of data blocks
    # At most one more request per table: a larger table's index and filter outgrow the first tail read.
    assert large[0].requests <= small[0].requests + len(large[3])


def _length(get: tuple[str, str | None]) -> int:
    lo, hi = get[1].split("=")[1].split("-")  # type: ignore[union-attr]
    return int(hi) - int(lo) + 1


def _opens_table(get: tuple[str, str | None], m: Any) -> bool:
    """A ranged GET that opens a table: its tail (to the blob's end), or the rest of its
    index and filter (up to where the tail read began)."""
    size = {e.blob_id: e.size for e in m.files}[get[0].rsplit("/", 1)[-1]]
    end = int(get[1].split("-")[1])  # type: ignore[union-attr]
    return end in (size - 1, size - TAIL_READ - 1)


@pytest.mark.parametrize("kind", ["checkpoint", "s3"])
def test_an_hdfs_backed_lookup_stops_at_the_newest_file_that_decides_the_key(
        spark, tmp_path: Path, make_store, kind: str) -> None:
    from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot

    checkpoint = str(tmp_path / "hdfs")
    # 2,000 accounts, 1,000 rows a batch: batch N touches accounts 1000*(N%2)...: every
    # batch leaves a delta; the last batch's accounts are decided by the newest delta.
    aggregate(spark, checkpoint, keys=2000, rows=1000, batches=5, store="hdfs")
    state = spark_state(spark, checkpoint)
    batch = CheckpointReader(checkpoint).committed_batches()[-1]
    if kind == "s3":
        store, _, _ = make_store("s3")
        create_snapshot(checkpoint, store, "agg")
        src: Any = SnapshotSource(store, "agg", "latest")
    else:
        src = CheckpointSource(checkpoint)
    recent = f"account-{(batch * 1000) % 2000 + 7}"  # written by the last batch
    hit = lookup_key(src, key={"account": recent}, cache=PartitionCache())
    files = src.partition_files(0, hit.partition, "default")
    partition_bytes = sum(f.size for f in files if f.name.endswith((".delta", ".snapshot")))
    assert hit.found and {"n": hit.value["count"], "total": hit.value["sum"]} == state[recent][1]
    assert [p.rsplit("/", 1)[-1] for p in hit.files_read if not p.endswith("schema")] == [f"{batch + 1}.delta"]
    assert hit.bytes_read < partition_bytes
    # A key the last batch did not touch is found in an older delta; one that is nowhere reads every file.
    older = f"account-{((batch - 1) * 1000) % 2000 + 7}"
    hit = lookup_key(src, key={"account": older}, cache=PartitionCache())
    assert hit.found and {"n": hit.value["count"], "total": hit.value["sum"]} == state[older][1]
    assert len([p for p in hit.files_read if p.endswith(".delta")]) >= 2
    assert agrees_with_spark(spark, checkpoint, src, sample=200) == 2000


def test_a_checkpoint_on_s3_or_hdfs_and_a_snapshot_in_an_hdfs_store_answer_by_ranged_reads(
        spark, tmp_path: Path, stack, hdfs, make_store) -> None:
    """The ranged reads of every backend (S3 `Range` with `If-Match`, WebHDFS `OPEN` offset and
    length) give the answers of the local checkpoint, reading less than the partition."""
    from airflow_provider_streamstate.backends.hdfs.webhdfs import HdfsPath, WebHdfs
    from airflow_provider_streamstate.engine.checkpoint.filesystems import open_checkpoint_fs
    from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
    from tests.s3 import s3_client

    local = tmp_path / "agg"
    aggregate(spark, str(local), keys=3000, rows=4000, batches=2)
    # The same files on S3 and HDFS, read once: the session's state maintenance may still be
    # writing a store snapshot in the background (a hidden temporary file, gone when renamed).
    files: dict[str, bytes] = {}
    for p in local.rglob("*"):
        if p.is_file() and not p.name.startswith("."):
            with contextlib.suppress(FileNotFoundError):
                files[p.relative_to(local).as_posix()] = p.read_bytes()
    client = s3_client(stack, "primary")
    bucket, prefix = stack.s3["primary"]["bucket"], f"tests/ranged-{tmp_path.name[-8:]}"
    for rel, data in files.items():
        client.put_object(Bucket=bucket, Key=f"{prefix}/{rel}", Body=data)
    hdfs_url = hdfs.url(f"/checkpoints/ranged-{tmp_path.name[-8:]}")
    webhdfs = WebHdfs.for_authority(HdfsPath.parse(hdfs_url).authority, env=hdfs.env())
    for rel, data in files.items():
        webhdfs.create(f"{HdfsPath.parse(hdfs_url).path}/{rel}", data)
    store, _, _ = make_store("hdfs")
    create_snapshot(str(local), store, "agg")
    sources = {
        "s3": CheckpointSource(f"s3a://{bucket}/{prefix}",
                               reader=CheckpointReader(open_checkpoint_fs(f"s3a://{bucket}/{prefix}", connection=client))),
        "hdfs": CheckpointSource(hdfs_url, reader=CheckpointReader(open_checkpoint_fs(hdfs_url, connection=webhdfs))),
        "hdfs store": SnapshotSource(store, "agg", "latest"),
    }
    reference = CheckpointSource(str(local))
    rnd = random.Random(9)
    for name, src in sources.items():
        for n in rnd.sample(range(3000), 25):
            want = lookup_key(reference, key={"account": f"account-{n}"}, cache=PartitionCache())
            got = lookup_key(src, key={"account": f"account-{n}"}, cache=PartitionCache())
            assert (got.found, got.value, got.partition) == (want.found, want.value, want.partition), (name, n)
            partition = sum(f.size for f in src.partition_files(0, got.partition, "default"))
            assert 0 < got.bytes_read < partition, (name, got.bytes_read, partition)
            assert any(p.endswith(".sst") for p in got.files_read), name
