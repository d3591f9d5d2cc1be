"""Unchanged-snapshot benchmark, local: what a snapshot of a 10,000-file checkpoint costs when
nothing changed since its parent, against stat-ing every file of the cut (the least any
snapshot must do to know that nothing changed).

    .venv/bin/python benchmarks/unchanged_snapshot_bench.py [--partitions 200] [--files-per-store 25] [--runs 5]

Builds the synthetic HDFS-state-store checkpoint of `s3_checkpoint_bench.py` (metadata logs,
one delta and its `.crc` per partition and version) on the local disk, takes a first
snapshot into a local store (fsync off: the figure is the catalog and planning work), then
times `--runs` snapshots with nothing changed (`always`) and `--runs` stats of the cut's
files. Writes .bench/unchanged_snapshot_results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_common import WORK, write_results  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=200)
    ap.add_argument("--files-per-store", type=int, default=25)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()

    from airflow_provider_streamstate.engine.catalog.gc import collect_garbage
    from airflow_provider_streamstate.engine.checkpoint.reader import (
        HDFS_PROVIDER,
        PROVIDER_CONF,
        CheckpointReader,
    )
    from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
    from airflow_provider_streamstate.engine.stores import LocalStore

    WORK.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="unchanged-", dir=WORK))
    try:
        ckpt = root / "ckpt"
        files: dict[str, bytes] = {"metadata": json.dumps({"id": "11111111-2222-3333-4444-555555555555"}).encode(),
                                   "sources/0/0": b'v1\n{"t":{"0":0}}'}
        meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": {PROVIDER_CONF: HDFS_PROVIDER}}
        for b in range(a.files_per_store):
            files[f"offsets/{b}"] = f"v1\n{json.dumps(meta)}\n{json.dumps({'t': {'0': b + 1}})}".encode()
            files[f"commits/{b}"] = b"v1\n{}"
        info = [{"storeName": "default", "numColsPrefixKey": 0, "numPartitions": a.partitions}]
        files["state/0/_metadata/metadata"] = ("v1\n" + json.dumps(
            {"operatorInfo": {"operatorId": 0, "operatorName": "stateStoreSave"}, "stateStoreInfo": info})).encode()
        for p in range(a.partitions):
            for v in range(1, a.files_per_store + 1):
                files[f"state/0/{p}/{v}.delta"] = f"p{p}v{v}".encode() * 256
                files[f"state/0/{p}/.{v}.delta.crc"] = f"crc{p}{v}".encode()
        for rel, body in files.items():
            (ckpt / rel).parent.mkdir(parents=True, exist_ok=True)
            (ckpt / rel).write_bytes(body)
        store = LocalStore(root / "store", fsync=False)
        first = create_snapshot(str(ckpt), store, "bench")
        collect_garbage(store)  # its census lets a snapshot rely on the parent's blobs
        cut = [ckpt / f.path for f in CheckpointReader(str(ckpt)).plan().files]

        snaps, stats = [], []
        for _ in range(a.runs):
            t0 = time.perf_counter()
            again = create_snapshot(str(ckpt), store, "bench", always=True)
            snaps.append(time.perf_counter() - t0)
            assert again.blobs_uploaded == 0 and again.files_hashed == 0 and again.blobs_checked == 0
            t0 = time.perf_counter()
            for f in cut:
                os.stat(f)
            stats.append(time.perf_counter() - t0)
        results = {
            "files_in_checkpoint": len(files), "files_in_cut": len(first.manifest.files),
            "unchanged_snapshot_s": round(statistics.median(snaps), 4),
            "stat_every_file_of_the_cut_s": round(statistics.median(stats), 4),
        }
        results["snapshot_over_stat"] = round(results["unchanged_snapshot_s"] / results["stat_every_file_of_the_cut_s"], 1)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    write_results("unchanged_snapshot", results)


if __name__ == "__main__":
    main()
