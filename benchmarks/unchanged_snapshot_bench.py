"""Unchanged-snapshot benchmark, local: what a snapshot of a 10,000-file checkpoint costs when
nothing changed since its parent, against stat-ing every file of the cut (what any snapshot
that planned the cut would do to know that nothing changed); then what one more batch costs
in manifest bytes.

    .venv/bin/python benchmarks/unchanged_snapshot_bench.py [--partitions 200] [--files-per-store 25] [--runs 5]
    .venv/bin/python benchmarks/unchanged_snapshot_bench.py --partitions 2000    # 100,000 files

Builds the synthetic HDFS-state-store checkpoint of `s3_checkpoint_bench.py` (metadata logs,
one delta and its `.crc` per partition and version) on the local disk, takes a first
snapshot into a local store (fsync off: the figure is the catalog and manifest work), then
times `--runs` snapshots with nothing changed (`always`; the commit log says the parent's
batch is still the newest, so each is a delta of no change) and `--runs` stats of the
cut's files; then writes one more batch (its offsets and commit, a delta and its `.crc` in
every partition) and snapshots it: the bytes of that manifest (a delta: what the batch
wrote) against the full manifest's. Writes .bench/unchanged_snapshot_results.json.
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

    from airflow_provider_streamstate.backends.local.store import LocalStore
    from airflow_provider_streamstate.engine.catalog.gc import collect_garbage
    from airflow_provider_streamstate.engine.checkpoint.reader import (
        HDFS_PROVIDER,
        PROVIDER_CONF,
        CheckpointReader,
    )
    from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot

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

        snaps, stats, kinds = [], [], []
        for _ in range(a.runs):
            t0 = time.perf_counter()
            again = create_snapshot(str(ckpt), store, "bench", always=True)
            snaps.append(time.perf_counter() - t0)
            assert again.unchanged and again.blobs_uploaded == 0 and again.files_hashed == 0 and again.blobs_checked == 0
            kinds.append(again.manifest_bytes)
            t0 = time.perf_counter()
            for f in cut:
                os.stat(f)
            stats.append(time.perf_counter() - t0)
        # One more batch: its metadata logs, and a delta (with its .crc) in every partition.
        n = a.files_per_store
        wrote = {f"offsets/{n}": files[f"offsets/{n - 1}"], f"commits/{n}": b"v1\n{}"}
        for p in range(a.partitions):
            wrote[f"state/0/{p}/{n + 1}.delta"] = f"p{p}v{n + 1}".encode() * 256
            wrote[f"state/0/{p}/.{n + 1}.delta.crc"] = f"crc{p}{n + 1}".encode()
        for rel, body in wrote.items():
            (ckpt / rel).write_bytes(body)
        t0 = time.perf_counter()
        batch = create_snapshot(str(ckpt), store, "bench")
        batch_s = time.perf_counter() - t0
        assert batch.manifest.delta is not None and len(batch.manifest.delta.changed) == len(wrote)
        results = {
            "files_in_checkpoint": len(files), "files_in_cut": len(first.manifest.files),
            "unchanged_snapshot_s": round(statistics.median(snaps), 4),
            "unchanged_snapshot_max_s": round(max(snaps), 4),
            "unchanged_snapshots_s": [round(x, 4) for x in snaps],
            "unchanged_manifest_bytes": kinds,
            "stat_every_file_of_the_cut_s": round(statistics.median(stats), 4),
            "full_manifest_bytes": first.manifest_bytes,
            "one_batch_files_written": len(wrote),
            "one_batch_manifest_bytes": batch.manifest_bytes,
            "one_batch_manifest_bytes_per_file_written": round(batch.manifest_bytes / len(wrote), 1),
            "one_batch_snapshot_s": round(batch_s, 3),
        }
        results["snapshot_over_stat"] = round(results["unchanged_snapshot_s"] / results["stat_every_file_of_the_cut_s"], 2)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    write_results("unchanged_snapshot", results)


if __name__ == "__main__":
    main()
