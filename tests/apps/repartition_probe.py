"""A small stateful file stream for a Spark line's own Python (tests/integration/test_rescale.py):
counts and sums per key of the JSON lines in ROOT/in, checkpointed at CKPT.

    python repartition_probe.py run CKPT ROOT PROVIDER PARTITIONS [v2|dedup]
                                                    (to the end of its input; v2: a max too;
                                                     dedup: the first record of each key instead,
                                                     each batch's written to ROOT/out/<batch>)
    python repartition_probe.py follow CKPT ROOT PROVIDER PARTITIONS STOP
                                                    (a batch a second, until the file STOP exists)
    python repartition_probe.py repartition CKPT N                  (Spark's own API, called directly)
    python repartition_probe.py state CKPT [STATE_VAR]              (its state, as Spark reads it)
    python repartition_probe.py wait PATH                           (until the file PATH exists)

PROVIDER `tws` runs a transformWithStateInPandas count instead (RocksDB): a value state
`total` and a list state `seen` of every value of the key, in arrival order. `run` reads one
file a batch. PROVIDER `apiws-hdfs` or `apiws-rocksdb` runs the count and sum per key as an
applyInPandasWithState group state, on that store.

Commands joined by `--` run in order in one Spark session (one JVM start, the dearest part
of each), each printing one JSON line on stdout: the batches run (or `refused`: the error
Spark's `start()` raised), Spark's error class, or the state.

    python repartition_probe.py serve IDLE_S        (requests on stdin, one a line: a JSON list of
                                                     commands; see tests/spark_probe.py)

`serve` keeps the process's SparkContext for request after request, each in a new session
(SQL confs its own; the JVM's active session while it runs) and ending in a line
`{"__probe__": "done"}` or `{"__probe__": "error", ...}`, after which its queries are stopped
and its state stores unloaded, as the process's exit would; it exits when stdin closes or no
request came for IDLE_S seconds. `PROBE_CONF` (JSON) adds Spark
confs to the session (S3A for an s3a:// checkpoint; HDFS comes with HADOOP_CONF_DIR); a JSON
object as a command's last argument adds SQL confs to that command alone (e.g. a checkpoint
format for one query of several)."""

from __future__ import annotations

import json
import os
import select
import sys
import time
import traceback

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

PROVIDERS = {"hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
             "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"}


_COMMAND_CONF_KEYS: set[str] = set()  # the confs the last command alone was given, unset before the next
_REQUEST: list[SparkSession] = []  # `serve`: the session of the request being run


def base_session() -> SparkSession:
    """The process's one local session (its SparkContext: the JVM)."""
    builder = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false") \
        .config("spark.ui.showConsoleProgress", "false").config("spark.driver.host", "127.0.0.1")
    for k, v in json.loads(os.environ.get("PROBE_CONF", "{}")).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def session(conf: dict[str, str]) -> SparkSession:
    """The session commands run in (the request's, under `serve`), with `conf` set for what
    runs next (the SQL confs a query reads when it starts)."""
    spark = _REQUEST[0] if _REQUEST else base_session()
    for k, v in conf.items():
        spark.conf.set(k, v)
    return spark


def tws_counts(df):  # noqa: ANN001, ANN201 - a DataFrame in, a DataFrame out
    import pandas as pd
    from pyspark.sql.streaming import StatefulProcessor
    from pyspark.sql.types import LongType, StructField, StructType

    class Count(StatefulProcessor):
        def init(self, handle) -> None:  # noqa: ANN001
            self.total = handle.getValueState("total", StructType([StructField("n", LongType())]))
            self.seen = handle.getListState("seen", StructType([StructField("v", LongType())]))

        def handleInputRows(self, key, rows, timerValues):  # noqa: ANN001, ANN201, N802, N803
            n = self.total.get()[0] if self.total.exists() else 0
            for pdf in rows:
                n += len(pdf)
                self.seen.appendList([(int(v),) for v in pdf["v"]])
            self.total.update((n,))
            yield pd.DataFrame({"k": [key[0]], "n": [n]})

        def close(self) -> None:
            pass

    return df.groupBy("k").transformWithStateInPandas(Count(), outputStructType="k string, n long",
                                                      outputMode="Update", timeMode="None")


def apiws_counts(df):  # noqa: ANN001, ANN201 - a DataFrame in, a DataFrame out
    import pandas as pd

    def count(key, frames, state):  # noqa: ANN001, ANN202
        n, total = state.get if state.exists else (0, 0)
        for pdf in frames:
            n += len(pdf)
            total += int(pdf["v"].sum())
        state.update((n, total))
        yield pd.DataFrame({"k": [key[0]], "n": [n], "s": [total]})

    return df.groupBy("k").applyInPandasWithState(count, "k string, n long, s long", "c long, s long", "Update",
                                                  "NoTimeout")


def command(argv: list[str]) -> None:
    own = json.loads(argv.pop()) if len(argv) > 3 and argv[-1].startswith("{") else {}
    active = _REQUEST[0] if _REQUEST else SparkSession.getActiveSession()
    for k in _COMMAND_CONF_KEYS if active is not None else ():
        active.conf.unset(k)
    _COMMAND_CONF_KEYS.clear()
    _COMMAND_CONF_KEYS.update(own)
    mode, ckpt = argv[1], argv[2]
    if mode == "wait":  # the caller acts meanwhile (a recovery), on the answers so far
        while not os.path.exists(ckpt):
            time.sleep(0.2)
        print(json.dumps({"waited": ckpt}))
        return
    if mode == "run" and argv[4] == "tws":
        root, partitions = argv[3], argv[5]
        spark = session({"spark.sql.shuffle.partitions": partitions,
                         "spark.sql.streaming.stateStore.providerClass": PROVIDERS["rocksdb"], **own})
        df = spark.readStream.schema("k string, v long").option("maxFilesPerTrigger", 1).json(f"{root}/in")
        q = tws_counts(df).writeStream.foreachBatch(lambda d, b: d.count()).outputMode("update") \
            .option("checkpointLocation", ckpt).trigger(availableNow=True).start()
        q.awaitTermination()
        print(json.dumps({"batch": q.lastProgress["batchId"] if q.lastProgress else None}))
    elif mode == "run" and argv[4].startswith("apiws-"):
        root, partitions = argv[3], argv[5]
        spark = session({"spark.sql.shuffle.partitions": partitions,
                         "spark.sql.streaming.stateStore.providerClass": PROVIDERS[argv[4].split("-", 1)[1]], **own})
        df = spark.readStream.schema("k string, v long").json(f"{root}/in")
        q = apiws_counts(df).writeStream.foreachBatch(lambda d, b: d.count()).outputMode("update") \
            .option("checkpointLocation", ckpt).trigger(availableNow=True).start()
        q.awaitTermination()
        print(json.dumps({"batch": q.lastProgress["batchId"] if q.lastProgress else None}))
    elif mode in ("run", "follow"):
        root, provider, partitions = argv[3], argv[4], argv[5]
        spark = session({"spark.sql.shuffle.partitions": partitions,
                         "spark.sql.streaming.stateStore.providerClass": PROVIDERS[provider], **own})
        df = spark.readStream.schema("k string, v long").json(f"{root}/in")
        if mode == "run" and argv[6:] == ["dedup"]:  # a deduplication: its state is the keys seen
            writer = df.dropDuplicates(["k"]).writeStream.outputMode("append").option("checkpointLocation", ckpt) \
                .foreachBatch(lambda d, b: d.write.mode("overwrite").json(f"{root}/out/{b}"))
        else:
            # v2, the query's next version: one more aggregate, so one more state column
            aggs = [F.count("*").alias("c"), F.sum("v").alias("s")] + \
                ([F.max("v").alias("m")] if mode == "run" and argv[6:] == ["v2"] else [])
            writer = df.groupBy("k").agg(*aggs).writeStream \
                .foreachBatch(lambda d, b: d.count()).outputMode("update").option("checkpointLocation", ckpt)
        try:
            q = (writer.trigger(availableNow=True) if mode == "run" else writer.trigger(processingTime="1 second"))\
                .start()
        except Exception as exc:  # noqa: BLE001 - what a plain spark-submit would die of is the answer
            print(json.dumps({"refused": " ".join(str(exc).split())[:2000]}))
            return
        if mode == "follow":
            while not os.path.exists(argv[6]):
                time.sleep(0.2)
                if not q.isActive:
                    break
            q.processAllAvailable()
            q.stop()
        try:
            q.awaitTermination()
        except Exception as exc:  # noqa: BLE001 - a query refused at its first batch (its state's schema)
            import re

            print(json.dumps({"refused": " ".join(str(exc).split())[:2000],
                              "error_classes": sorted(set(re.findall(r"\[([A-Z][A-Z_]{5,})\]", str(exc))))}))
            return
        print(json.dumps({"batch": q.lastProgress["batchId"] if q.lastProgress else None}))
    elif mode == "repartition":
        spark = session(own)
        try:
            spark._streamingCheckpointManager.repartition(ckpt, int(argv[3]))
            print(json.dumps({"ok": True}))
        except Exception as exc:  # noqa: BLE001 - the error class is the answer
            line = next((ln for ln in str(exc).splitlines() if "[" in ln and "]" in ln), str(exc))
            print(json.dumps({"ok": False, "error": line.strip()}))
    elif len(argv) > 3:  # a transformWithState variable: a list's elements, a value's fields
        spark = session(own)
        rows = spark.read.format("statestore").option("stateVarName", argv[3]).load(ckpt).collect()
        state: dict[str, list[object]] = {}
        for r in rows:
            state.setdefault(r.key.k, []).extend(
                [r.list_element.v] if "list_element" in r.__fields__ else list(r.value))
        print(json.dumps(state))
    else:
        spark = session(own)
        rows = spark.read.format("statestore").load(ckpt).collect()
        print(json.dumps({r.key.k: list(r.value) for r in rows}))


def request_session(base: SparkSession) -> SparkSession:
    """A new session of the one SparkContext, made the JVM's active and default one: what
    resolves a data source by the active session (Spark's state reader) reads its confs."""
    spark = base.newSession()
    jvm = spark._jvm
    get_class = getattr(SparkSession, "_get_j_spark_session_class", None)  # Spark 4: the classic session
    j_session = get_class(jvm) if get_class is not None else jvm.SparkSession
    j_session.setActiveSession(spark._jsparkSession)
    j_session.setDefaultSession(spark._jsparkSession)
    SparkSession._activeSession = spark
    spark.streams.active  # noqa: B018 - its query manager registers the state store coordinator the state reader asks
    return spark


def end_request(spark: SparkSession) -> None:
    """What the process's exit did after a request: no query of it left running, and no
    state store of it left loaded (Spark's maintenance would go on writing snapshots and
    deleting old files in checkpoints the tests go on to check)."""
    for q in spark.streams.active:
        q.stop()
    state = spark._jvm.org.apache.spark.sql.execution.streaming.state
    getattr(getattr(state, "StateStore$"), "MODULE$").stop()


def read_line(fd: int, pending: bytearray, idle_s: float) -> bytes | None:
    """The next line of `fd`, or None at its end or after `idle_s` without one."""
    while b"\n" not in pending:
        if not select.select([fd], [], [], idle_s)[0]:
            return None
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return None
        pending += chunk
    line, _, rest = bytes(pending).partition(b"\n")
    pending[:] = rest
    return line


def serve(argv0: str, idle_s: float) -> int:
    """Requests until stdin closes or none comes for `idle_s`: each a new session of the one
    SparkContext, its commands' answers, then the request's end."""
    base, pending = base_session(), bytearray()
    while (line := read_line(sys.stdin.fileno(), pending, idle_s)) is not None:
        _COMMAND_CONF_KEYS.clear()
        try:
            _REQUEST[:] = [request_session(base)]
            for c in json.loads(line):
                command([argv0, *c])
            end_request(_REQUEST[0])
            print(json.dumps({"__probe__": "done"}))
        except Exception:  # noqa: BLE001 - the request failed: the caller retires the process
            print(json.dumps({"__probe__": "error", "error": traceback.format_exc()[-4000:]}))
    base.stop()
    return 0


def main(argv: list[str]) -> int:
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[attr-defined]  # each answer as it comes
    if argv[1:2] == ["serve"]:
        return serve(argv[0], float(argv[2]))
    args = argv[1:]
    while args:
        cut = args.index("--") if "--" in args else len(args)
        command([argv[0], *args[:cut]])
        args = args[cut + 1:]
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
