"""Key lookups (engine/lookup) are exact: for real checkpoints of every supported operator,
on both state store providers, with and without changelog checkpointing and in both
checkpoint formats, a lookup of every key Spark's state reader (`format("statestore")`)
shows — up to a thousand per checkpoint — finds it in the partition Spark put it in with
the same value, and keys that are not there (near misses of real ones) are not found.
Keys and values cover every type state can hold; a transformWithState key's timers are
listed as Spark lists them. A key removed by a later delta is gone; a
corrupted or truncated file is an error naming it, and nothing of it is cached; a snapshot
in a store answers like its checkpoint, reading only the key's partition."""

from __future__ import annotations

import datetime as dt
import decimal
import random
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.core.errors import CorruptionError
from airflow_provider_streamstate.engine.lookup import (
    CheckpointSource,
    PartitionCache,
    SnapshotSource,
    lookup_key,
)
from airflow_provider_streamstate.engine.lookup.formats.codec import decompress
from airflow_provider_streamstate.engine.lookup.formats.hdfs_state import apply_records
from airflow_provider_streamstate.engine.lookup.formats.rocksdb_state import DELETE, parse_changelog
from airflow_provider_streamstate.engine.state.spark import read_state, state_store_confs
from tests.lookup_cases import ours_norm, spark_norm, to_input

pytestmark = pytest.mark.integration

UTC = dt.UTC
SAMPLE = 1000  # present keys checked per checkpoint (all of them when fewer), and as many absent ones
HDFS, ROCKS, ROCKS_CL = "hdfs", "rocksdb", "rocksdb-changelog"


@contextmanager
def confs(spark: Any, values: dict[str, str]) -> Iterator[None]:
    """Set session confs for one query and put back what was there."""
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


def run_query(spark: Any, df: Any, checkpoint: str, *, store: str, batches: int, mode: str = "update",
              extra: dict[str, str] | None = None) -> int:
    """Run `df` to a noop sink until batch `batches` committed; its last committed batch."""
    settings = {**state_store_confs(store), "spark.sql.shuffle.partitions": "4",
                "spark.sql.streaming.stateStore.minDeltasForSnapshot": "3", **(extra or {})}
    with confs(spark, settings):
        q = df.writeStream.format("noop").outputMode(mode).option("checkpointLocation", checkpoint) \
            .trigger(processingTime="100 milliseconds").start()
        deadline = time.monotonic() + 240
        try:
            while not q.lastProgress or q.lastProgress["batchId"] < batches:
                assert q.exception() is None, q.exception()
                assert time.monotonic() < deadline, "the query did not reach its batches"
                time.sleep(0.1)
        finally:
            q.stop()
    return CheckpointReader(checkpoint).committed_batches()[-1]


class State:
    """Spark's state reader on a checkpoint, collected: `rows` and `schema`. Spark reads a
    checkpoint of format 2 only with the format set, and replays changelogs only with
    changelog checkpointing on: both come from the checkpoint, as the engine's reader does."""

    def __init__(self, spark: Any, checkpoint: str, **options: Any) -> None:
        reader = CheckpointReader(checkpoint)
        batch = reader.resolve_batch(options.get("batchId"))
        changelog = any(Path(checkpoint, "state").rglob("*.changelog"))
        settings = {"spark.sql.streaming.stateStore.checkpointFormatVersion": str(reader.checkpoint_format(batch)),
                    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": str(changelog).lower()}
        with confs(spark, settings):
            df = read_state(spark, checkpoint, **options)
            self.schema = df.schema
            self.rows = df.collect()

    def type_of(self, column: str) -> Any:
        return self.schema[column].dataType


def rate(spark: Any, rows: int = 300) -> Any:
    return spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows).load()


# --- building keys from Spark's rows, and near misses --------------------------------------


def near_miss(key: list[Any], rnd: random.Random) -> list[Any]:
    """The key with one column changed (a value no real key has, most of the time)."""
    out = list(key)
    order = list(range(len(out)))
    rnd.shuffle(order)
    for i in order:
        v = out[i]
        if isinstance(v, bool) or v is None:
            continue
        if isinstance(v, int):
            out[i] = v - 1 if v > 0 else v + 1  # in range of any integer type; maybe a real key
        elif isinstance(v, str):
            out[i] = v + "~"
        elif isinstance(v, bytes):
            out[i] = v + b"\x01"
        elif isinstance(v, float):
            out[i] = v + 12345.5
        elif isinstance(v, decimal.Decimal):
            out[i] = v + 1
        elif isinstance(v, dt.datetime):
            out[i] = v + dt.timedelta(days=4000)
        elif isinstance(v, dt.date):
            out[i] = v + dt.timedelta(days=4000)
        elif isinstance(v, list):
            out[i] = near_miss(v, rnd) if v and any(x is not None for x in v) else [1, 2, 3]
        else:
            continue
        return out
    return out + ["unused"]  # nothing to change: the lookup below then skips it


def check_single(spark: Any, checkpoint: str, *, batch: int | None = None, source: Any = None,
                 **reader_options: Any) -> int:
    """Every key of one store as Spark reads it (a sample) is found with its value in its
    partition; near misses are not found. Returns how many keys were checked."""
    state = State(spark, checkpoint, batchId=batch, **reader_options)
    key_t, value_t = state.type_of("key"), state.type_of("value")
    rows = state.rows
    assert rows, f"no state in {checkpoint}"
    rnd = random.Random(11)
    sample = rnd.sample(rows, min(SAMPLE, len(rows)))
    present = {spark_norm(r.key, key_t) for r in rows}
    src = source or CheckpointSource(checkpoint, batch)
    op = reader_options.get("operatorId", 0)
    for r in sample:
        key = to_input(r.key, key_t)
        hit = lookup_key(src, key=key, operator=op)
        assert hit.found, (r.key, hit.partition)
        assert hit.partition == r.partition_id, (r.key, hit.partition, r.partition_id)
        assert ours_norm(hit.value, hit.value_schema) == spark_norm(r.value, value_t), r.key
        miss = near_miss(key, rnd)
        if len(miss) == len(key):
            res = lookup_key(src, key=miss, operator=op)
            assert res.found == (ours_norm(res.key, res.key_schema) in present), miss
    return len(sample)


# --- aggregation: both providers, changelog on and off, checkpoint formats 1 and 2 ----------


def windowed_aggregation(spark: Any) -> Any:
    from pyspark.sql import functions as F

    return (rate(spark).withWatermark("timestamp", "3 seconds")
            .groupBy(F.window("timestamp", "2 seconds"), (F.col("value") % 37).alias("k"),
                     (F.col("value") % 3).cast("string").alias("s"))
            .agg(F.count("*").alias("n"), F.sum("value").alias("total"), F.max("value").alias("top")))


@pytest.mark.parametrize(("store", "fmt"), [(HDFS, "1"), (ROCKS, "1"), (ROCKS_CL, "1"), (ROCKS_CL, "2")])
def test_windowed_aggregation_keys_are_exact_and_removed_keys_are_gone(spark, tmp_path: Path, store: str,
                                                                       fmt: str) -> None:
    checkpoint = str(tmp_path / "agg")
    last = run_query(spark, windowed_aggregation(spark), checkpoint, store=store, batches=9,
                     extra={"spark.sql.streaming.stateStore.checkpointFormatVersion": fmt})
    assert check_single(spark, checkpoint) > 100
    # Windows the watermark passed were removed by later deltas/changelogs: keys found at an
    # early batch, gone at the last one, as Spark says too.
    early = 2
    old = State(spark, checkpoint, batchId=early)
    key_t = old.type_of("key")
    now = {spark_norm(r.key, key_t) for r in State(spark, checkpoint, batchId=last).rows}
    gone = [r for r in old.rows if spark_norm(r.key, key_t) not in now]
    assert gone, "no key was evicted"
    cache = PartitionCache()
    for r in gone[:50]:
        key = to_input(r.key, key_t)
        assert lookup_key(checkpoint, key=key, batch_id=early, cache=cache).found
        assert not lookup_key(checkpoint, key=key, cache=cache).found
    if store == HDFS or (store == ROCKS_CL and fmt == "1"):
        assert removal_written(checkpoint, gone[0], key_t, early, last)


def removal_written(checkpoint: str, row: Any, key_t: Any, early: int, last: int) -> bool:
    """A delta or changelog of the key's partition after `early` records its removal."""
    hit = lookup_key(checkpoint, key=to_input(row.key, key_t), batch_id=early)
    part_dir = Path(checkpoint) / "state" / "0" / str(hit.partition)
    from airflow_provider_streamstate.engine.lookup.encodings.unsafe_row import encode_row

    raw = encode_row(list(hit.key.values()), hit.key_schema)
    for v in range(early + 2, last + 2):
        delta, changelog = part_dir / f"{v}.delta", part_dir / f"{v}.changelog"
        if delta.exists():
            state = {raw: b"x"}
            apply_records(state, decompress(delta.read_bytes(), "lz4", str(delta)), str(delta), removals=True)
            if raw not in state:
                return True
        if changelog.exists():
            _, records = parse_changelog(decompress(changelog.read_bytes(), "lz4", str(changelog)), str(changelog))
            if any(kind == DELETE and key == b"\x00" + raw for kind, key, _ in records):
                return True
    return False


# --- every type as a key column (dropDuplicates) and as a value column (aggregate buffers) ---

TYPED_COLUMNS = {
    "bo": "value % 2 = 0",
    "by": "cast(value % 200 - 100 as tinyint)",
    "sh": "cast(value * 7 % 60000 - 30000 as smallint)",
    "i": "cast(value * 104729 % 2147483647 - 1073741824 as int)",
    "l": "value * 982451653 - 4611686018427387904",
    "f": "cast(value / 8.0 - 20 as float)",
    "d": "value * 1.25e7 - 3.3e8",
    "dc": "cast(value * 3.07 - 400 as decimal(10,2))",
    "dcb": "cast(value * 123456789012345.12345 - 9e17 as decimal(30,5))",
    "s": "if(value % 9 = 0, '', concat('k', repeat('é', cast(value % 5 as int)), cast(value as string)))",
    "bin": "cast(concat('b', cast(value % 1000 as string)) as binary)",
    "dt": "date_add(date'1969-12-25', cast(value % 9000 as int) - 4000)",
    "ts": "timestamp_micros(value * 86400000123 - 50000000000000000)",
    "tsn": "cast(timestamp_micros(value * 3600000007) as timestamp_ntz)",
    "st": "named_struct('a', cast(value % 13 as int), 'b', cast(value % 4 as string), "
          "'c', named_struct('x', value / 3.0))",
    "arr": "sequence(0, cast(value % 4 as int))",
    "arrs": "transform(sequence(1, cast(value % 3 as int)), x -> repeat('z', x))",
    "nul": "null",
}
VALUE_ONLY = {"m": "map('a', value, 'b', value % 7)"}  # maps cannot be grouping keys


def typed(spark: Any, with_nulls: bool = True) -> Any:
    from pyspark.sql import functions as F

    cols = [F.expr(f"if(value % 23 = {i % 23}, null, {e})" if with_nulls else e).alias(n)
            for i, (n, e) in enumerate(TYPED_COLUMNS.items())]
    return rate(spark, 250).select(F.col("value"), F.col("timestamp"), *cols)


@pytest.mark.parametrize("store", [HDFS, ROCKS_CL])
def test_every_type_as_a_dedup_key(spark, tmp_path: Path, store: str) -> None:
    checkpoint = str(tmp_path / "dedup")
    df = typed(spark).select(*TYPED_COLUMNS).dropDuplicates()
    run_query(spark, df, checkpoint, store=store, batches=4, mode="append")
    assert check_single(spark, checkpoint) >= SAMPLE


def test_every_type_as_a_value_column(spark, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    checkpoint = str(tmp_path / "values")
    df = typed(spark).select((F.col("value") % 97).alias("k"), *TYPED_COLUMNS,
                             *[F.expr(e).alias(n) for n, e in VALUE_ONLY.items()])
    aggs = [F.first(c).alias(f"first_{c}") for c in [*TYPED_COLUMNS, *VALUE_ONLY]]
    run_query(spark, df.groupBy("k").agg(*aggs), checkpoint, store=ROCKS_CL, batches=3)
    assert check_single(spark, checkpoint) == 97


def test_dropduplicates_with_a_watermark_and_within_watermark(spark, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    base = rate(spark).select((F.col("value") % 400).alias("d"), "timestamp").withWatermark("timestamp", "2 seconds")
    with_ts = str(tmp_path / "dedup-watermark")
    run_query(spark, base.dropDuplicates(["d", "timestamp"]), with_ts, store=HDFS, batches=6, mode="append")
    within = str(tmp_path / "dedup-within")
    run_query(spark, base.dropDuplicatesWithinWatermark(["d"]), within, store=ROCKS, batches=6, mode="append")
    assert check_single(spark, with_ts) > 100
    assert check_single(spark, within) >= 50


# --- stream-stream joins, applyInPandasWithState, transformWithState ------------------------


def joined(spark: Any) -> Any:
    from pyspark.sql import functions as F

    left = rate(spark, 200).select((F.col("value") % 150).alias("lk"), F.col("timestamp").alias("lt"),
                                   F.col("value").alias("lv"), F.expr("cast(value as string)").alias("ls")) \
        .withWatermark("lt", "1 hour")
    right = rate(spark, 200).select((F.col("value") % 170).alias("rk"), F.col("timestamp").alias("rt"),
                                    (F.col("value") * 2).alias("rv")).withWatermark("rt", "1 hour")
    return left.join(right, F.expr("lk = rk AND rt BETWEEN lt - INTERVAL 1 hour AND lt + INTERVAL 1 hour"))


@pytest.mark.parametrize(("store", "join_format"), [(HDFS, "2"), (ROCKS, "2"), (ROCKS_CL, "3")])
def test_stream_stream_join_sides(spark, tmp_path: Path, store: str, join_format: str) -> None:
    checkpoint = str(tmp_path / "join")
    run_query(spark, joined(spark), checkpoint, store=store, batches=3, mode="append",
              extra={"spark.sql.streaming.join.stateFormatVersion": join_format})
    src = CheckpointSource(checkpoint)
    for side in ("left", "right"):
        state = State(spark, checkpoint, joinSide=side)
        key_t, value_t = state.type_of("key"), state.type_of("value")
        expected: dict[Any, list[Any]] = {}
        keys: dict[Any, Any] = {}
        for r in state.rows:
            k = spark_norm(r.key, key_t)
            expected.setdefault(k, []).append(spark_norm(r.value, value_t))
            keys[k] = (to_input(r.key, key_t), r.partition_id)
        assert len(keys) > 100
        for k, (key, partition) in keys.items():
            hit = lookup_key(src, key=key, join_side=side)
            assert hit.found and hit.partition == partition, key
            assert sorted(map(repr, (ours_norm(v, hit.value_schema) for v in hit.value))) == \
                sorted(map(repr, expected[k])), key
        for absent in (10_000, 10_001, -5):
            assert not lookup_key(src, key=[absent], join_side=side).found


def _totals(key: Any, frames: Any, state: Any) -> Any:
    """applyInPandasWithState: per key, count and sum and the last label seen."""
    import pandas as pd

    count, total, label = state.get if state.exists else (0, 0, "")
    for df in frames:
        count += len(df)
        total += int(df["value"].sum())
        label = str(df["label"].iloc[-1])
    state.update((count, total, label))
    yield pd.DataFrame({"k": [key[0]], "count": [count]})


@pytest.mark.parametrize(("store", "state_format"), [(HDFS, "1"), (ROCKS_CL, "2")])
def test_apply_in_pandas_with_state(spark, tmp_path: Path, store: str, state_format: str) -> None:
    from pyspark import cloudpickle
    from pyspark.sql import functions as F

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this module
    checkpoint = str(tmp_path / "fmgws")
    df = rate(spark).select(F.concat(F.lit("acct-"), (F.col("value") % 211).cast("string")).alias("k"),
                            "value", F.expr("concat('l', value % 10)").alias("label")) \
        .groupBy("k").applyInPandasWithState(_totals, "k string, count long",
                                             "count long, total long, label string", "Update", "NoTimeout")
    run_query(spark, df, checkpoint, store=store, batches=3,
              extra={"spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion": state_format})
    assert check_single(spark, checkpoint) == 211


def test_transform_with_state_value_list_and_map_state(spark, tmp_path: Path) -> None:
    from pyspark import cloudpickle
    from pyspark.sql import functions as F

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    checkpoint = str(tmp_path / "tws")
    df = rate(spark, 200).select((F.col("value") % 120).alias("k"), "value") \
        .groupBy("k").transformWithStateInPandas(_processor(timers=True), "k long, c long", "Update", "ProcessingTime")
    run_query(spark, df, checkpoint, store=ROCKS_CL, batches=5)
    src = CheckpointSource(checkpoint)
    rnd = random.Random(3)
    # Timers: every key's registered timers, in time order, as Spark's reader lists them.
    timers: dict[int, list[int]] = {}
    for r in State(spark, checkpoint, readRegisteredTimers="true").rows:
        timers.setdefault(r.key.k, []).append(r.expiration_timestamp_ms)
    assert len(timers) == 120
    for k in range(120):
        hit = lookup_key(src, key=[k], state_var="$timers")
        assert hit.kind == "timers" and [t["expiration_timestamp_ms"] for t in hit.value] == sorted(timers[k]), k
    assert not lookup_key(src, key=[999], state_var="$timers").found
    for var, kind in (("cnt", "value"), ("items", "list"), ("bymod", "map")):
        state = State(spark, checkpoint, stateVarName=var)
        key_t = state.type_of("key")
        expected: dict[Any, list[Any]] = {}
        keys = {}
        for r in state.rows:
            k = spark_norm(r.key, key_t)
            if kind == "value":
                item = spark_norm(r.value, state.type_of("value"))
            elif kind == "list":
                item = spark_norm(r.list_element, state.type_of("list_element"))
            else:
                item = (spark_norm(r.user_map_key, state.type_of("user_map_key")),
                        spark_norm(r.user_map_value, state.type_of("user_map_value")))
            expected.setdefault(k, []).append(item)
            keys[k] = (to_input(r.key, key_t), r.partition_id)
        # Keys 0 mod 3 append no item; map keys 4 mod 5 may have had their only entry removed.
        assert len(keys) == {"cnt": 120, "items": 80}.get(var, len(keys)) and len(keys) >= 80
        for k in range(120):
            hit = lookup_key(src, key=[k], state_var=var)
            if (k,) not in keys:
                assert not hit.found, (var, k)
                continue
            key, partition = keys[(k,)]
            assert hit.found and hit.partition == partition and hit.kind == kind, (var, key)
            if kind == "value":
                assert [ours_norm(hit.value, hit.value_schema)] == expected[(k,)]
            elif kind == "list":
                assert [ours_norm(v, hit.value_schema) for v in hit.value] == expected[(k,)]
            else:
                got = sorted((repr(tuple(e["key"].values())), ours_norm(e["value"], hit.value_schema))
                             for e in hit.value)
                assert got == sorted((repr(u), v) for u, v in expected[(k,)])
            assert not lookup_key(src, key=[k + 10_000 + rnd.randrange(99)], state_var=var).found


def _processor(timers: bool = False) -> Any:
    """Value, list and map state; with `timers` (processing time), the count kept with a TTL
    and two timers per key, re-registered at each batch, far in the future."""
    import pandas as pd
    from pyspark.sql.streaming import StatefulProcessor
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    class Processor(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.handle = handle
            self.count = handle.getValueState("cnt", StructType([StructField("c", LongType())]),
                                              *([3_600_000] if timers else []))
            self.items = handle.getListState("items", StructType([StructField("x", LongType()),
                                                                  StructField("s", StringType())]))
            self.by_mod = handle.getMapState("bymod", StructType([StructField("mk", LongType())]),
                                             StructType([StructField("mv", LongType()), StructField("t", StringType())]))

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:  # noqa: N802, N803
            n = 0
            for pdf in rows:
                for x in pdf["value"].tolist():
                    n += 1
                    if x % 3:
                        self.items.appendValue((int(x), f"s{x}"))
                    self.by_mod.updateValue((int(x) % 5,), (int(x), f"t{x % 7}"))
            if self.by_mod.containsKey((4,)) and n % 2:
                self.by_mod.removeKey((4,))
            c = (self.count.get()[0] if self.count.exists() else 0) + n
            self.count.update((c,))
            if timers:
                for t in list(self.handle.listTimers()):
                    self.handle.deleteTimer(t)
                now = timerValues.getCurrentProcessingTimeInMs()
                self.handle.registerTimer(now + 3_600_000 + int(key[0]))
                self.handle.registerTimer(now + 7_200_000)
            yield pd.DataFrame({"k": [key[0]], "c": [c]})

        def close(self) -> None:
            pass

    return Processor()


# --- damaged files, snapshots ----------------------------------------------------------------


def test_a_corrupted_or_truncated_file_is_an_error_naming_it_and_nothing_is_cached(spark, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    original = str(tmp_path / "agg")
    df = rate(spark).groupBy((F.col("value") % 50).alias("k")).agg(F.sum("value").alias("total"))
    run_query(spark, df, original, store=HDFS, batches=4)
    rows = State(spark, original).rows
    key = [rows[0].key[0]]
    good = lookup_key(original, key=key)
    assert good.found
    part = Path(original) / "state" / "0" / str(good.partition)
    deltas = sorted(part.glob("*.delta"), key=lambda p: int(p.stem))

    for damage in ("truncate", "flip"):
        copy = tmp_path / f"copy-{damage}"
        shutil.copytree(original, copy)
        victim = copy / deltas[-1].relative_to(original)
        # Maintenance may have written a snapshot file covering the last delta in the
        # background; without it, the lookup must read the damaged delta to rebuild the state.
        for snapshot_file in victim.parent.glob("*.snapshot"):
            snapshot_file.unlink()
        data = victim.read_bytes()
        victim.write_bytes(data[: len(data) // 2] if damage == "truncate" else
                           data[:40] + bytes([data[40] ^ 0xFF]) + data[41:])
        cache = PartitionCache()
        for _ in range(2):  # the second attempt fails the same way: nothing was cached
            with pytest.raises(CorruptionError) as err:
                lookup_key(str(copy), key=key, cache=cache)
            assert victim.name in str(err.value) and "\n" not in err.value.one_line()
        assert len(cache) == 1  # the schema only

    rocks = str(tmp_path / "rocks")
    run_query(spark, df, rocks, store=ROCKS_CL, batches=4)
    hit = lookup_key(rocks, key=key)
    for pattern, damage in (("SSTs/*.sst", "flip"), ("*.changelog", "truncate")):
        copy = tmp_path / f"rocks-{pattern[:3]}"
        shutil.copytree(rocks, copy)
        files = CheckpointSource(str(copy)).partition_files(0, hit.partition, "default")
        victims = [f.path for f in files if Path(f.path).match(pattern)]
        assert victims, pattern
        victim = copy / victims[-1]
        data = victim.read_bytes()
        victim.write_bytes(data[:-7] if damage == "truncate" else data[:30] + bytes([data[30] ^ 0x55]) + data[31:])
        with pytest.raises(CorruptionError, match=victim.name):
            lookup_key(str(copy), key=key, cache=PartitionCache())


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_a_snapshot_answers_like_its_checkpoint_reading_only_the_keys_partition(spark, tmp_path: Path, make_store,
                                                                                kind: str) -> None:
    from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot

    checkpoint = str(tmp_path / "agg")
    run_query(spark, windowed_aggregation(spark), checkpoint, store=ROCKS_CL, batches=5)
    store, _, _ = make_store(kind)
    m = create_snapshot(checkpoint, store, "agg").manifest
    src = SnapshotSource(store, "agg", m.snapshot_id)
    assert check_single(spark, checkpoint, batch=m.batch_id, source=src) > 100
    state = State(spark, checkpoint, batchId=m.batch_id)
    cache = PartitionCache()
    key = to_input(state.rows[0].key, state.type_of("key"))
    cold = lookup_key(SnapshotSource(store, "agg", "latest"), key=key, cache=cache)
    assert cold.found and cold.bytes_read > 0 and not cold.cached
    assert all(p.startswith(f"state/0/{cold.partition}/") or "/_metadata/" in p for p in cold.files_read)
    warm = lookup_key(SnapshotSource(store, "agg", "latest"), key=key, cache=cache)
    assert warm.cached and warm.bytes_read == 0 and warm.value == cold.value


def test_lookups_are_refused_in_one_line_where_unsupported(spark, tmp_path: Path) -> None:
    from pyspark import cloudpickle
    from pyspark.sql import functions as F

    from airflow_provider_streamstate.engine.core.errors import UnsupportedCheckpointError

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    avro = str(tmp_path / "avro")
    df = rate(spark, 50).select((F.col("value") % 5).alias("k"), "value") \
        .groupBy("k").transformWithStateInPandas(_processor(), "k long, c long", "Update", "None")
    run_query(spark, df, avro, store=ROCKS_CL, batches=1,
              extra={"spark.sql.streaming.stateStore.encodingFormat": "avro"})
    sessions = str(tmp_path / "sessions")
    df = rate(spark, 50).withWatermark("timestamp", "2 seconds") \
        .groupBy(F.session_window("timestamp", "1 second"), (F.col("value") % 5).alias("k")).count()
    run_query(spark, df, sessions, store=HDFS, batches=1, mode="append")
    for checkpoint, words in ((avro, "avro"), (sessions, "session window")):
        with pytest.raises(UnsupportedCheckpointError, match=words) as err:
            lookup_key(checkpoint, key=[1], state_var="cnt" if checkpoint == avro else None)
        assert "\n" not in err.value.one_line()
