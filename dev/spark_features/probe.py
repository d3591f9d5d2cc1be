"""Which state features one Spark line has, tried for real: run by dev/spark_features.py with
that line's spark-submit and Python, it prints one JSON object (feature -> outcome).

Each probe runs a small query (file source, available-now: one batch per input file) and
reads what it wrote; an outcome is {"ok": true, ...facts} or {"ok": false, "error": first
line}. Nothing here needs Kafka.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
FORMAT = "spark.sql.streaming.stateStore.checkpointFormatVersion"


def error_line(exc: BaseException) -> str:
    java = getattr(exc, "java_exception", None)
    text = str(java.toString()) if java is not None else str(exc)
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:400]


class Probe:
    def __init__(self, spark: Any, root: Path) -> None:
        self.spark = spark
        self.root = root
        self.input = root / "input"
        self.input.mkdir()
        self.out: dict[str, Any] = {}
        for i in range(3):  # one batch per file
            rows = [{"k": f"k{j % 5}", "v": i * 10 + j, "ts": f"2024-01-01 00:0{i}:{j:02d}"} for j in range(10)]
            (self.input / f"part-{i}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))

    def run(self, name: str, fn: Callable[[], Any]) -> None:
        try:
            value = fn()
            self.out[name] = {"ok": True, **(value if isinstance(value, dict) else {"value": value})}
        except Exception as exc:  # noqa: BLE001 - an outcome like any other
            self.out[name] = {"ok": False, "error": error_line(exc)}
            if os.environ.get("PROBE_TRACE"):
                traceback.print_exc()

    def confs(self, **confs: str) -> None:
        for key, value in confs.items():
            self.spark.conf.set(key, value)

    def source(self) -> Any:
        return (self.spark.readStream.schema("k STRING, v LONG, ts TIMESTAMP").option("maxFilesPerTrigger", 1)
                .json(str(self.input)))

    def run_query(self, df: Any, checkpoint: Path, mode: str = "update") -> int:
        q = (df.writeStream.format("noop").outputMode(mode).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
        q.awaitTermination(300)
        if q.exception() is not None:
            raise RuntimeError(str(q.exception()))
        return int(q.lastProgress["batchId"])

    def aggregate(self, name: str, provider: str, changelog: bool = False, fmt: int = 1) -> Path:
        from pyspark.sql import functions as F

        self.confs(**{"spark.sql.streaming.stateStore.providerClass": provider, CHANGELOG: str(changelog).lower(),
                      FORMAT: str(fmt)})
        ckpt = self.root / name
        self.run_query(self.source().groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("s")), ckpt)
        return ckpt


def files(ckpt: Path) -> list[str]:
    return sorted(p.relative_to(ckpt).as_posix() for p in ckpt.rglob("*") if p.is_file())


def main() -> int:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", "2")
             .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    root = Path(tempfile.mkdtemp(prefix="spark-features-"))
    p = Probe(spark, root)
    p.out["spark"] = {"ok": True, "value": spark.version}
    _ = spark.streams.active  # the StateStoreCoordinator (PySpark 4.1 reads RocksDB offline only with it)

    hdfs = p.aggregate("hdfs", HDFS)
    p.run("checkpoint layout (HDFS aggregation)", lambda: {
        "offsets_header": (hdfs / "offsets" / "0").read_text().split("\n")[0],
        "offsets_fields": sorted(json.loads((hdfs / "offsets" / "0").read_text().split("\n")[1])),
        "commits_header": (hdfs / "commits" / "0").read_text().split("\n")[0],
        "operator_metadata": [f for f in files(hdfs) if "/_metadata/" in f and not f.endswith(".crc")],
        "spark_crc": sorted({f.split("/")[0] for f in files(hdfs) if f.endswith(".crc")
                             and not f.rsplit("/", 1)[-1].startswith(".")}),
    })
    p.run("statestore batchId+operatorId", lambda: {"rows": spark.read.format("statestore").option("batchId", 2)
                                                    .option("operatorId", 0).load(str(hdfs)).count()})
    p.run("state-metadata", lambda: {"rows": [r.asDict() for r in spark.read.format("state-metadata")
                                              .load(str(hdfs)).collect()]})

    rocks = p.aggregate("rocksdb", ROCKSDB)
    # Without changelog checkpointing every version is a snapshot (<v>.zip): start at batch 2's.
    p.run("statestore snapshotStartBatchId (RocksDB)", lambda: {"rows": spark.read.format("statestore")
          .option("snapshotStartBatchId", 2).option("snapshotPartitionId", 0).option("batchId", 2)
          .load(str(rocks)).count()})

    changelog = p.aggregate("rocksdb-changelog", ROCKSDB, changelog=True)
    p.run("RocksDB changelog checkpointing", lambda: {
        "changelog_files": len([f for f in files(changelog) if f.endswith(".changelog")])} | (
        {} if any(f.endswith(".changelog") for f in files(changelog)) else {"ok": False}))
    p.run("statestore readChangeFeed", lambda: {"rows": spark.read.format("statestore").option("readChangeFeed", True)
          .option("changeStartBatchId", 0).load(str(changelog)).count()})

    def format2() -> dict[str, Any]:
        ckpt = p.aggregate("format2", ROCKSDB, changelog=True, fmt=2)
        commit = (ckpt / "commits" / "2").read_text().split("\n")
        names = [f.rsplit("/", 1)[-1] for f in files(ckpt) if f.startswith("state/0/0/")]
        out = {"commit_header": commit[0], "stateUniqueIds": "stateUniqueIds" in json.loads(commit[1]),
               "state_files": sorted({n.split(".", 1)[-1] for n in names if n[0].isdigit()}),
               "unique_id_names": any("_" in n and n[0].isdigit() for n in names)}
        if not out["unique_id_names"]:  # a Spark without the conf ignores it
            raise RuntimeError(f"{FORMAT}=2 is not known here: it wrote format 1 ({out})")
        return out
    p.run("checkpoint format 2", format2)
    p.confs(**{FORMAT: "1"})

    def join() -> dict[str, Any]:
        p.confs(**{"spark.sql.streaming.stateStore.providerClass": HDFS})
        left = p.source().withWatermark("ts", "1 hour").select(F.col("k").alias("lk"), F.col("ts").alias("lts"))
        right = p.source().withWatermark("ts", "1 hour").select(F.col("k").alias("rk"), F.col("ts").alias("rts"))
        ckpt = root / "join"
        p.run_query(left.join(right, F.expr("lk = rk AND lts = rts")), ckpt, mode="append")
        return {"left_rows": spark.read.format("statestore").option("joinSide", "left").load(str(ckpt)).count(),
                "store_name_rows": spark.read.format("statestore").option("storeName", "left-keyToNumValues")
                .load(str(ckpt)).count()}
    p.run("statestore joinSide/storeName (stream-stream join)", join)

    def apply_in_pandas() -> dict[str, Any]:
        import pandas as pd
        from pyspark.sql.streaming.state import GroupStateTimeout

        def count(key: Any, pdfs: Any, state: Any) -> Any:
            n = state.get[0] if state.exists else 0
            for pdf in pdfs:
                n += len(pdf)
            state.update((n,))
            yield pd.DataFrame({"k": [key[0]], "n": [n]})

        p.confs(**{"spark.sql.streaming.stateStore.providerClass": HDFS})
        ckpt = root / "apply-in-pandas"
        p.run_query(p.source().groupBy("k").applyInPandasWithState(
            count, "k STRING, n LONG", "n LONG", "Update", GroupStateTimeout.NoTimeout), ckpt)
        out: dict[str, Any] = {"ran": True}
        try:
            out["state_rows"] = spark.read.format("statestore").load(str(ckpt)).count()
        except Exception as exc:  # noqa: BLE001
            out["state_read"] = error_line(exc)
        return out
    p.run("applyInPandasWithState", apply_in_pandas)

    def transform_with_state_in_pandas() -> dict[str, Any]:
        import pandas as pd
        from pyspark.sql.streaming import StatefulProcessor

        class Count(StatefulProcessor):
            def init(self, handle: Any) -> None:
                self.n = handle.getValueState("n", "n LONG")

            def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:  # noqa: N802, N803
                n = self.n.get()[0] if self.n.exists() else 0
                for pdf in rows:
                    n += len(pdf)
                self.n.update((n,))
                yield pd.DataFrame({"k": [key[0]], "n": [n]})

            def close(self) -> None:
                pass

        p.confs(**{"spark.sql.streaming.stateStore.providerClass": ROCKSDB})
        ckpt = root / "tws-pandas"
        p.run_query(p.source().groupBy("k").transformWithStateInPandas(
            Count(), "k STRING, n LONG", "Update", "None"), ckpt)
        out: dict[str, Any] = {"schema_files": len([f for f in files(ckpt) if "/_stateSchema/" in f]),
                               "metadata_v2": any("/_metadata/v2/" in f for f in files(ckpt))}
        out["stateVarName_rows"] = spark.read.format("statestore").option("stateVarName", "n").load(str(ckpt)).count()
        return out
    p.run("transformWithStateInPandas", transform_with_state_in_pandas)

    def transform_with_state_rows() -> dict[str, Any]:
        from pyspark.sql import Row
        from pyspark.sql.streaming import StatefulProcessor

        class Count(StatefulProcessor):
            def init(self, handle: Any) -> None:
                self.n = handle.getValueState("n", "n LONG")

            def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:  # noqa: N802, N803
                n = self.n.get()[0] if self.n.exists() else 0
                n += sum(1 for _ in rows)
                self.n.update((n,))
                yield Row(k=key[0], n=n)

            def close(self) -> None:
                pass

        p.confs(**{"spark.sql.streaming.stateStore.providerClass": ROCKSDB})
        ckpt = root / "tws-rows"
        grouped = p.source().groupBy("k")
        if not hasattr(grouped, "transformWithState"):
            raise AttributeError("GroupedData has no transformWithState (the row-based Python API)")
        p.run_query(grouped.transformWithState(Count(), "k STRING, n LONG", "Update", "None"), ckpt)
        return {"stateVarName_rows": spark.read.format("statestore").option("stateVarName", "n").load(str(ckpt))
                .count()}
    p.run("transformWithState (Python, rows)", transform_with_state_rows)

    def repartition() -> dict[str, Any]:
        manager = getattr(spark, "_streamingCheckpointManager", None)
        if manager is None:
            raise AttributeError("SparkSession has no _streamingCheckpointManager")
        target = root / "repartition"
        shutil.copytree(rocks, target)
        manager.repartition(str(target), 4)
        return {"partitions": sorted(n for n in os.listdir(target / "state" / "0") if n.isdigit()),
                "batches": sorted(int(n) for n in os.listdir(target / "offsets") if n.isdigit())}
    p.run("offline repartition (RocksDB)", repartition)

    def metadata_required() -> dict[str, Any]:
        target = root / "no-metadata"
        shutil.copytree(hdfs, target)
        (target / "metadata").unlink()
        for crc in target.glob("*metadata*.crc"):
            crc.unlink()
        with (p.input / "part-3.json").open("w") as f:
            f.write(json.dumps({"k": "k9", "v": 1, "ts": "2024-01-01 00:09:00"}) + "\n")
        p.confs(**{"spark.sql.streaming.stateStore.providerClass": HDFS})
        try:
            p.run_query(p.source().groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("s")), target)
        finally:
            (p.input / "part-3.json").unlink()
        return {"restarted_without_metadata": True, "new_metadata": (target / "metadata").exists()}
    p.run("restart without the top-level metadata file", metadata_required)

    def offset_log_v2() -> dict[str, Any]:
        p.confs(**{"spark.sql.streaming.offsetLog.formatVersion": "2",
                   "spark.sql.streaming.stateStore.providerClass": HDFS})
        try:
            ckpt = p.aggregate("offsets-v2", HDFS)
        finally:
            spark.conf.unset("spark.sql.streaming.offsetLog.formatVersion")
        lines = (ckpt / "offsets" / "0").read_text().split("\n")
        if lines[0] == "v1":  # a Spark without the conf ignores it
            raise RuntimeError(f"spark.sql.streaming.offsetLog.formatVersion=2 is not known here: it wrote {lines[0]}")
        out: dict[str, Any] = {"header": lines[0], "source_lines": lines[2:]}
        try:
            from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader

            CheckpointReader(str(ckpt)).plan()
            out["engine"] = "planned a cut"
        except Exception as exc:  # noqa: BLE001
            out["engine"] = error_line(exc)
        return out
    p.run("offset log v2 (spark.sql.streaming.offsetLog.formatVersion=2)", offset_log_v2)

    print("PROBE-RESULT " + json.dumps(p.out, sort_keys=True), flush=True)
    spark.stop()
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
