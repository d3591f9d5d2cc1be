"""The golden cases (dev/golden.py writes and checks them): one named function per case, an
operator on a state store, each returning the streaming query that writes the case's
checkpoint; the query's source is what golden.json records. Cases of one reader test each
come last. Every source is `rate-micro-batch`, so batch b's rows are fixed by b."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

HDFS, ROCKS, ROCKS_CL = "hdfs", "rocksdb", "rocksdb-changelog"
FORMAT_CONF = "spark.sql.streaming.stateStore.checkpointFormatVersion"


@dataclass(frozen=True)
class Case:
    """A golden case: the query (`build(spark)`), the state store and confs it starts with,
    how many batches it runs, the Spark lines it exists on, and the reader option sets whose
    answers are recorded (`batchId` None: the last committed batch; "each": every batch)."""

    name: str
    build: Callable[[Any], Any]
    store: str
    batches: int
    mode: str = "update"
    confs: dict[str, str] = field(default_factory=dict)
    readers: tuple[dict[str, Any], ...] = ({},)
    since: tuple[int, int] = (3, 5)  # the first Spark line that has the operator / setting
    # Reader option sets whose answers depend on the time the case ran (processing-time
    # timers): a regenerated case is compared on their keys and entries per key only.
    timed: tuple[dict[str, Any], ...] = ()

    def source(self) -> str:
        return inspect.getsource(self.build)


CASES: dict[str, Case] = {}


def case(store: str, batches: int, **kw: Any) -> Callable[[Callable[[Any], Any]], Callable[[Any], Any]]:
    """Register the decorated query function as a golden case under its name."""
    def register(build: Callable[[Any], Any]) -> Callable[[Any], Any]:
        CASES[build.__name__] = Case(build.__name__, build, store, batches, **kw)
        return build
    return register


# --- the queries ----------------------------------------------------------------------------


def rate(spark: Any, rows: int = 300) -> Any:
    return spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows).load()


def windowed_aggregation(spark: Any) -> Any:
    from pyspark.sql import functions as F

    return (rate(spark).withWatermark("timestamp", "3 seconds")
            .groupBy(F.window("timestamp", "2 seconds"), (F.col("value") % 37).alias("k"),
                     (F.col("value") % 3).cast("string").alias("s"))
            .agg(F.count("*").alias("n"), F.sum("value").alias("total"), F.max("value").alias("top")))


EARLY = 2  # the batch the eviction checks read: windows the watermark passed later were there


@case(HDFS, 9, readers=({}, {"batchId": EARLY}))
def windowed_aggregation_hdfs(spark: Any) -> Any:
    return windowed_aggregation(spark)


@case(ROCKS, 9, readers=({}, {"batchId": EARLY}))
def windowed_aggregation_rocksdb(spark: Any) -> Any:
    return windowed_aggregation(spark)


@case(ROCKS_CL, 9, readers=({}, {"batchId": EARLY}))
def windowed_aggregation_rocksdb_changelog(spark: Any) -> Any:
    return windowed_aggregation(spark)


# Spark 4.0 writes checkpoint format 2 too, but no Spark here reads its state back (4.0's
# reader fails on the `<version>_<id>` file names, 4.1's expects RocksDB metadata v1): with
# nothing to compare a lookup with, the case starts at 4.1.
@case(ROCKS_CL, 9, readers=({}, {"batchId": EARLY}), confs={FORMAT_CONF: "2"}, since=(4, 1))
def windowed_aggregation_rocksdb_changelog_format_2(spark: Any) -> Any:
    return windowed_aggregation(spark)


# Every type as a key column (dropDuplicates) and as a value column (aggregate buffers).
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


def typed(spark: Any) -> Any:
    from pyspark.sql import functions as F

    cols = [F.expr(f"if(value % 23 = {i % 23}, null, {e})").alias(n) for i, (n, e) in enumerate(TYPED_COLUMNS.items())]
    return rate(spark, 250).select(F.col("value"), F.col("timestamp"), *cols)


@case(HDFS, 4, mode="append", since=(4, 0))  # timestamp_ntz keys: Spark 3.5 has the type, 4.0 the state reader
def typed_dedup_hdfs(spark: Any) -> Any:
    return typed(spark).select(*TYPED_COLUMNS).dropDuplicates()


@case(ROCKS_CL, 4, mode="append", since=(4, 0))
def typed_dedup_rocksdb_changelog(spark: Any) -> Any:
    return typed(spark).select(*TYPED_COLUMNS).dropDuplicates()


@case(ROCKS_CL, 3, since=(4, 0))
def typed_values_rocksdb_changelog(spark: Any) -> Any:
    from pyspark.sql import functions as F

    df = typed(spark).select((F.col("value") % 97).alias("k"), *TYPED_COLUMNS,
                             *[F.expr(e).alias(n) for n, e in VALUE_ONLY.items()])
    return df.groupBy("k").agg(*[F.first(c).alias(f"first_{c}") for c in [*TYPED_COLUMNS, *VALUE_ONLY]])


@case(HDFS, 6, mode="append")
def dedup_with_watermark_hdfs(spark: Any) -> Any:
    from pyspark.sql import functions as F

    base = rate(spark).select((F.col("value") % 400).alias("d"), "timestamp").withWatermark("timestamp", "2 seconds")
    return base.dropDuplicates(["d", "timestamp"])


@case(ROCKS, 6, mode="append", since=(3, 5))
def dedup_within_watermark_rocksdb(spark: Any) -> Any:
    from pyspark.sql import functions as F

    base = rate(spark).select((F.col("value") % 400).alias("d"), "timestamp").withWatermark("timestamp", "2 seconds")
    return base.dropDuplicatesWithinWatermark(["d"])


def joined(spark: Any) -> Any:
    from pyspark.sql import functions as F

    left = rate(spark, 200).select((F.col("value") % 150).alias("lk"), F.col("timestamp").alias("lt"),
                                   F.col("value").alias("lv"), F.expr("cast(value as string)").alias("ls")) \
        .withWatermark("lt", "1 hour")
    right = rate(spark, 200).select((F.col("value") % 170).alias("rk"), F.col("timestamp").alias("rt"),
                                    (F.col("value") * 2).alias("rv")).withWatermark("rt", "1 hour")
    return left.join(right, F.expr("lk = rk AND rt BETWEEN lt - INTERVAL 1 hour AND lt + INTERVAL 1 hour"))


JOIN_FORMAT = "spark.sql.streaming.join.stateFormatVersion"
JOIN_SIDES = ({"joinSide": "left"}, {"joinSide": "right"})


@case(HDFS, 3, mode="append", confs={JOIN_FORMAT: "2"}, readers=JOIN_SIDES)
def join_hdfs(spark: Any) -> Any:
    return joined(spark)


@case(ROCKS, 3, mode="append", confs={JOIN_FORMAT: "2"}, readers=JOIN_SIDES)
def join_rocksdb(spark: Any) -> Any:
    return joined(spark)


@case(ROCKS_CL, 3, mode="append", confs={JOIN_FORMAT: "3"}, readers=JOIN_SIDES, since=(4, 1))
def join_rocksdb_changelog_format_3(spark: Any) -> Any:
    return joined(spark)


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


def apply_in_pandas(spark: Any) -> Any:
    from pyspark.sql import functions as F

    return rate(spark).select(F.concat(F.lit("acct-"), (F.col("value") % 211).cast("string")).alias("k"),
                              "value", F.expr("concat('l', value % 10)").alias("label")) \
        .groupBy("k").applyInPandasWithState(_totals, "k string, count long",
                                             "count long, total long, label string", "Update", "NoTimeout")


GROUP_STATE_FORMAT = "spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion"


@case(HDFS, 3, confs={GROUP_STATE_FORMAT: "1"}, since=(4, 0))
def apply_in_pandas_with_state_hdfs(spark: Any) -> Any:
    return apply_in_pandas(spark)


@case(ROCKS_CL, 3, confs={GROUP_STATE_FORMAT: "2"}, since=(4, 0))
def apply_in_pandas_with_state_rocksdb_changelog(spark: Any) -> Any:
    return apply_in_pandas(spark)


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


TWS_READERS = ({"readRegisteredTimers": "true"}, {"stateVarName": "cnt"}, {"stateVarName": "items"},
               {"stateVarName": "bymod"})


@case(ROCKS_CL, 5, readers=TWS_READERS, since=(4, 0), timed=({"readRegisteredTimers": "true"},))
def transform_with_state_rocksdb_changelog(spark: Any) -> Any:
    """transformWithStateInPandas: value, list and map state, a TTL and processing-time timers."""
    from pyspark.sql import functions as F

    return rate(spark, 200).select((F.col("value") % 120).alias("k"), "value") \
        .groupBy("k").transformWithStateInPandas(_processor(timers=True), "k long, c long", "Update", "ProcessingTime")


# --- cases of one reader test each -----------------------------------------------------------


def small_aggregation(spark: Any) -> Any:
    from pyspark.sql import functions as F

    return rate(spark).groupBy((F.col("value") % 50).alias("k")).agg(F.sum("value").alias("total"))


@case(HDFS, 4)
def small_aggregation_hdfs(spark: Any) -> Any:
    """The files a corruption test damages: deltas (the maintenance snapshots removed from its copy)."""
    return small_aggregation(spark)


@case(ROCKS_CL, 4)
def small_aggregation_rocksdb_changelog(spark: Any) -> Any:
    """The files a corruption test damages: SST tables and changelogs."""
    return small_aggregation(spark)


KEYS = 40  # 10 rows a batch: each key is written every fourth batch


@case(ROCKS_CL, 8, readers=({"batchId": "each"},))
def count_per_key_rocksdb_changelog(spark: Any) -> Any:
    """A key's history: Spark's answer at every batch (a zip, its tables and the changelogs after it)."""
    from pyspark.sql import functions as F

    return rate(spark, 10).groupBy((F.col("value") % KEYS).alias("k")) \
        .agg(F.count("*").alias("n"), F.max("value").alias("top"))


@case(ROCKS_CL, 1, readers=(), confs={"spark.sql.streaming.stateStore.encodingFormat": "avro"}, since=(4, 0))
def transform_with_state_avro(spark: Any) -> Any:
    """State in Avro (an encoding lookups refuse): no reader output is needed."""
    from pyspark.sql import functions as F

    return rate(spark, 50).select((F.col("value") % 5).alias("k"), "value") \
        .groupBy("k").transformWithStateInPandas(_processor(), "k long, c long", "Update", "None")


@case(HDFS, 1, mode="append", readers=())
def session_window_hdfs(spark: Any) -> Any:
    """Session windows (a layout lookups refuse): no reader output is needed."""
    from pyspark.sql import functions as F

    return rate(spark, 50).withWatermark("timestamp", "2 seconds") \
        .groupBy(F.session_window("timestamp", "1 second"), (F.col("value") % 5).alias("k")).count()
