"""transformWithState benchmark: snapshot and restore of a transformWithStateInPandas
stream's checkpoint against a plain copy of the same directory.

    .venv/bin/python benchmarks/tws_bench.py [--keys 1000000] [--files 4] [--partitions 4] [--parallelism 8]

In one local Spark session (local[2], RocksDB with changelog checkpointing):

* `keys` rows with distinct keys written as `files` parquet files, then read by a file
  stream (`maxFilesPerTrigger` 1: one micro-batch per file) into a transformWithStateInPandas
  query (NoTime mode, no timers, `noop` sink, available-now trigger) that keeps one
  ValueState per key (`count`) and a small ListState (`recent`) for one key in 100;
  the build is timed and reported, but is not part of any ratio;
* baseline: `shutil.copytree` of the checkpoint (and the same copy with every file and
  directory fsynced, the durability the local store and restore give);
* `create_snapshot` into an empty LocalStore (first snapshot);
* one more micro-batch that touches `--touch` keys, then a second `create_snapshot`
  (incremental);
* `restore_snapshot` of the first snapshot into a new directory (with fsync, the default),
  then, as a check (not timed), the restored copy's state read with Spark's state reader:
  one ValueState row per key, each seen once, and the ListState keys.

The copies, the first snapshot and the restore run `--runs` times (each into a new store or
directory), then the incremental snapshot once into each of those stores; medians are
reported. The page cache is warmed with one read of every file before the timed steps.
Results are ratios to the copy measured in the same run; no timing is asserted. Prints a Markdown
table and writes .bench/tws_results.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from bench_common import WORK, MiB, write_results  # this folder is on sys.path; it puts the repo there too

VALUE_VAR = "count"
LIST_VAR = "recent"
LIST_EVERY = 100  # one key in LIST_EVERY also keeps a ListState


def timed(fn: Any) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def tree_stats(root: Path) -> tuple[int, int]:
    """(bytes, files) under `root`."""
    n = size = 0
    for dirpath, _, names in os.walk(root):
        for name in names:
            size += (Path(dirpath) / name).stat().st_size
            n += 1
    return size, n


def warm(root: Path) -> None:
    for dirpath, _, names in os.walk(root):
        for name in names:
            (Path(dirpath) / name).read_bytes()


def copy_fsync(src: Path, dst: Path) -> None:
    """`shutil.copytree`, then every file and directory fsynced (what restore guarantees)."""
    shutil.copytree(src, dst)
    for dirpath, _, names in os.walk(dst):
        for name in names:
            fd = os.open(Path(dirpath) / name, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        fd = os.open(dirpath, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)


def processor_class() -> type:
    """The StatefulProcessor, defined on first use (pyspark is imported in main)."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class KeyCount(StatefulProcessor):  # type: ignore[misc]
        """Per key: how many rows it saw and the sum of their `v` (ValueState), and for one
        key in LIST_EVERY the last few `v` (ListState). Emits nothing."""

        def init(self, handle: Any) -> None:
            self.count = handle.getValueState(VALUE_VAR, "n long, total long")
            self.recent = handle.getListState(LIST_VAR, "v long")

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
            vs = [int(x) for pdf in rows for x in pdf["v"]]
            old = self.count.get()
            n, total = (int(old[0]), int(old[1])) if old is not None else (0, 0)
            self.count.update((n + len(vs), total + sum(vs)))
            if int(key[0]) % LIST_EVERY == 0:
                self.recent.appendList([(v,) for v in vs])
            return iter(())

        def close(self) -> None:
            pass

    return KeyCount


def run_available_now(spark: Any, source: Path, checkpoint: Path) -> int:
    """Run the query over every file of `source` not yet read; the last committed batch."""
    stream = (
        spark.readStream.schema("k long, v long").option("maxFilesPerTrigger", 1).parquet(str(source))
        .groupBy("k")
        .transformWithStateInPandas(processor_class()(), "k long", "Update", "NoTime")
    )
    query = (
        stream.writeStream.format("noop").outputMode("update")
        .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return int(query.lastProgress["batchId"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--files", type=int, default=4, help="input files = micro-batches that build the state")
    p.add_argument("--partitions", type=int, default=4, help="shuffle partitions = state store partitions")
    p.add_argument("--parallelism", type=int, default=8, help="snapshot/restore transfers (the CLI's default)")
    p.add_argument("--touch", type=int, default=100, help="keys the incremental batch updates")
    p.add_argument("--runs", type=int, default=3, help="rounds of the timed steps (medians reported)")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    a = p.parse_args(argv)

    from pyspark.sql import functions as F

    from airflow_provider_streamstate.backends.local.store import LocalStore
    from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
    from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
    from airflow_provider_streamstate.engine.state.spark import read_state, spark_session

    WORK.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="tws-bench-", dir=WORK))
    source, checkpoint = root / "input", root / "checkpoint"
    spark = spark_session("tws-bench", state_store="rocksdb-changelog", shuffle_partitions=a.partitions)
    r: dict[str, Any] = {"keys": a.keys, "input_files": a.files, "partitions": a.partitions, "parallelism": a.parallelism,
                         "touched_keys": a.touch, "runs": a.runs, "load_avg_start": os.getloadavg()[0]}
    try:
        # --- build (not part of the ratios) ----------------------------------------------
        (spark.range(a.keys).select(F.col("id").alias("k"), (F.col("id") % 1000).alias("v"))
         .repartition(a.files).write.parquet(str(source)))
        print(f"building state: {a.keys} keys in {a.files} micro-batches ...", flush=True)
        r["build_s"], last = timed(partial(run_available_now, spark, source, checkpoint))
        r["build_batches"] = last + 1
        r["build_keys_per_s"] = round(a.keys / r["build_s"])
        state_bytes, files = tree_stats(checkpoint)
        r["checkpoint_bytes"], r["checkpoint_files"] = state_bytes, files
        r["state_bytes"] = tree_stats(checkpoint / "state")[0]
        print(f"  batch {last}: {files} files, {state_bytes / MiB:.1f} MiB ({r['build_s']:.0f} s, "
              f"{r['build_keys_per_s']} keys/s)", flush=True)
        warm(checkpoint)

        # --- timed: `runs` rounds, each into a new store and new directories -----------------
        rounds: dict[str, list[float]] = {k: [] for k in ("copy", "copy_fsync", "snapshot", "restore",
                                                          "incremental_snapshot")}
        snap = partial(create_snapshot, str(checkpoint), stream="tws", parallelism=a.parallelism)
        stores, firsts = [], []
        for i in range(a.runs):
            rounds["copy"].append(timed(partial(shutil.copytree, checkpoint, root / "copy"))[0])
            rounds["copy_fsync"].append(timed(partial(copy_fsync, checkpoint, root / "copy-fsync"))[0])
            shutil.rmtree(root / "copy")
            shutil.rmtree(root / "copy-fsync")
            store = LocalStore(root / f"store-{i}")
            secs, first = timed(partial(snap, store=store))
            rounds["snapshot"].append(secs)
            target = root / f"restored-{i}"
            rounds["restore"].append(timed(partial(restore_snapshot, store, "tws", first.manifest.snapshot_id, target,
                                                   parallelism=a.parallelism))[0])
            if i:
                shutil.rmtree(target)
            stores.append(store)
            firsts.append(first)
        first = firsts[0]
        r["snapshot_bytes"] = first.manifest.bytes_total
        r["snapshot_files"] = len(first.manifest.files)
        r["snapshot_bytes_uploaded"] = first.bytes_uploaded
        r["snapshot_blobs_uploaded"] = first.blobs_uploaded
        r["snapshot_batch"] = first.manifest.batch_id
        r["snapshot_operators"] = [f"{op.name} ({op.time_mode})" for op in first.manifest.operators]
        restored = root / "restored-0"
        r["restored_bytes"], r["restored_files"] = tree_stats(restored)

        # One more small micro-batch touching `touch` existing keys (not timed), then the
        # incremental snapshot into each round's store (parent: that round's first snapshot).
        step = max(1, a.keys // a.touch)
        (spark.range(0, a.keys, step, numPartitions=1).select(F.col("id").alias("k"), F.lit(1).cast("long").alias("v"))
         .write.mode("append").parquet(str(source)))
        r["incremental_batch_build_s"], r["incremental_batch"] = timed(
            partial(run_available_now, spark, source, checkpoint))
        r["checkpoint_bytes_after"], r["checkpoint_files_after"] = tree_stats(checkpoint)
        warm(checkpoint)
        for store in stores:
            secs, second = timed(partial(snap, store=store))
            rounds["incremental_snapshot"].append(secs)
        r["incremental_batch_id"] = second.manifest.batch_id
        r["incremental_bytes_uploaded"] = second.bytes_uploaded
        r["incremental_blobs_uploaded"] = second.blobs_uploaded
        r["incremental_files_hashed"] = second.files_hashed
        r["incremental_blobs_inherited"] = second.blobs_inherited
        r["incremental_files"] = len(second.manifest.files)
        for k, v in rounds.items():
            r[f"{k}_s"] = statistics.median(v)
            r[f"{k}_runs_s"] = [round(x, 3) for x in v]

        # --- check (not timed against the baseline): the restored copy's state, by Spark ---
        values = read_state(spark, str(restored), stateVarName=VALUE_VAR)
        r["check_s"], row = timed(lambda: values.agg(F.count("*").alias("rows"),
                                                     F.sum("value.n").alias("n")).collect()[0])
        r["restored_value_rows"], r["restored_value_sum_n"] = int(row["rows"]), int(row["n"] or 0)
        r["restored_list_keys"] = (read_state(spark, str(restored), stateVarName=LIST_VAR)
                                   .select("key").distinct().count())
        r["check_ok"] = (r["restored_value_rows"] == a.keys and r["restored_value_sum_n"] == a.keys
                         and r["restored_list_keys"] == (a.keys + LIST_EVERY - 1) // LIST_EVERY)
        r["load_avg_end"] = os.getloadavg()[0]
    finally:
        spark.sparkContext.setLogLevel("OFF")  # RocksDB maintenance racing shutdown logs harmless errors
        spark.stop()
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)

    for k in ("snapshot", "incremental_snapshot", "restore"):
        r[f"{k}_vs_copy"] = round(r[f"{k}_s"] / r["copy_s"], 2)
        r[f"{k}_vs_copy_fsync"] = round(r[f"{k}_s"] / r["copy_fsync_s"], 2)
    r = {k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()}
    write_results("tws", r)

    mb = r["checkpoint_bytes"] / MiB
    print(f"\ncheckpoint: {mb:.1f} MiB in {r['checkpoint_files']} files at batch {r['snapshot_batch']} "
          f"({a.keys} keys, built in {r['build_s']:.0f} s, {r['build_keys_per_s']} keys/s); "
          f"parallelism {a.parallelism}; medians of {a.runs} rounds\n")
    print("| operation | seconds | MiB/s | / copytree | / copytree + fsync |")
    print("| --- | ---: | ---: | ---: | ---: |")
    print(f"| baseline: `shutil.copytree` | {r['copy_s']:.3f} | {mb / r['copy_s']:.0f} | 1.00 | |")
    print(f"| baseline: `shutil.copytree` + fsync | {r['copy_fsync_s']:.3f} | {mb / r['copy_fsync_s']:.0f} | "
          f"{r['copy_fsync_s'] / r['copy_s']:.2f} | 1.00 |")
    for name, key in (("first snapshot", "snapshot"), ("restore (fsync)", "restore"),
                      (f"incremental snapshot ({a.touch} keys touched)", "incremental_snapshot")):
        rate = f"{mb / r[f'{key}_s']:.0f}" if key != "incremental_snapshot" else "-"
        print(f"| {name} | {r[f'{key}_s']:.3f} | {rate} | {r[f'{key}_vs_copy']:.2f} | "
              f"{r[f'{key}_vs_copy_fsync']:.2f} |")
    print(f"\nfirst snapshot: {r['snapshot_files']} files, {r['snapshot_bytes'] / MiB:.1f} MiB; incremental: "
          f"{r['incremental_bytes_uploaded'] / MiB:.3f} MiB in {r['incremental_blobs_uploaded']} new blobs, "
          f"{r['incremental_blobs_inherited']} inherited; restored copy: {r['restored_value_rows']} ValueState rows, "
          f"sum(n) {r['restored_value_sum_n']}, {r['restored_list_keys']} ListState keys "
          f"({'ok' if r['check_ok'] else 'MISMATCH'}); load average {r['load_avg_start']} -> {r['load_avg_end']}")
    return 0 if r["check_ok"] else 1


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.exit(main())
