"""Synthetic checkpoint directories with Spark's layout, for fast planner tests.

Their state files hold arbitrary bytes: the planner reads names and metadata, never
state contents (except a RocksDB zip's `metadata`, which is written for real here).
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from airflow_provider_streamstate.engine.checkpoint.reader import HDFS_PROVIDER as HDFS
from airflow_provider_streamstate.engine.checkpoint.reader import PROVIDER_CONF


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def make_checkpoint(
    root: Path, *, batches: int = 3, provider: str = HDFS, partitions: int = 2, operators: int = 1,
    stores: tuple[str, ...] = ("default",), conf: dict[str, str] | None = None, commit_extra: dict | None = None,
) -> Path:
    """Metadata logs for batches 0..batches-1, operator metadata, no state files yet."""
    write(root / "metadata", json.dumps({"id": "11111111-2222-3333-4444-555555555555"}))
    write(root / ".metadata.crc", b"crc")
    write(root / "sources/0/0", 'v1\n{"tx":{"0":0,"1":0}}')
    pinned = {PROVIDER_CONF: provider, **(conf or {})}
    for b in range(batches):
        meta = {"batchWatermarkMs": 1000 * b, "batchTimestampMs": 5000 + b, "conf": pinned}
        write(root / f"offsets/{b}", f"v1\n{json.dumps(meta)}\n" + json.dumps({"tx": {"0": 10 * (b + 1), "1": 20 * (b + 1)}}))
        write(root / f"commits/{b}", "v1\n" + json.dumps({"nextBatchWatermarkMs": 1000 * (b + 1), **(commit_extra or {})}))
    for op in range(operators):
        info = [{"storeName": s, "numColsPrefixKey": 0, "numPartitions": partitions} for s in stores]
        write(root / f"state/{op}/_metadata/metadata",
              "v1\n" + json.dumps({"operatorInfo": {"operatorId": op, "operatorName": "stateStoreSave"}, "stateStoreInfo": info}))
        for p in range(partitions):
            (root / f"state/{op}/{p}").mkdir(parents=True, exist_ok=True)
    return root


def store_dirs(root: Path, stores: tuple[str, ...] = ("default",)) -> list[Path]:
    out = []
    for op_dir in sorted((root / "state").iterdir()):
        for part in sorted(p for p in op_dir.iterdir() if p.name.isdigit()):
            out.extend(part if s == "default" else part / s for s in stores)
    return out


def rocksdb_zip(store_dir: Path, version: int | str, ssts: list[str]) -> None:
    meta = {"sstFiles": [{"localFileName": f"{i}.sst", "dfsSstFileName": s, "sizeBytes": 4} for i, s in enumerate(ssts)], "numKeys": 1}
    store_dir.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(store_dir / f"{version}.zip", "w") as z:
        z.writestr("metadata", "v1\n" + json.dumps(meta))
        z.writestr("CURRENT", "MANIFEST-000001\n")
    for s in ssts:
        write(store_dir / "SSTs" / s, b"sst-" + s.encode())


def maintenance_after_first_plan(root: Path, monkeypatch) -> list:  # noqa: ANN001
    """Make Spark's maintenance strike once, right after the first cut is planned: a
    `3.snapshot` replaces deltas 1-3 in every store of `root`. Returns the plans made."""
    from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader

    real_plan = CheckpointReader.plan
    calls: list = []

    def plan_then_maintain(self, batch_id=None):  # noqa: ANN001, ANN202
        plan = real_plan(self, batch_id)
        if not calls:
            for d in store_dirs(root):
                write(d / "3.snapshot", f"snapshot 3 of {d}")
                for v in (1, 2, 3):
                    (d / f"{v}.delta").unlink()
        calls.append(plan)
        return plan

    monkeypatch.setattr(CheckpointReader, "plan", plan_then_maintain)
    return calls
