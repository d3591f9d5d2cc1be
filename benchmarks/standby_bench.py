"""DR failover with a warm standby against today's restore at failover, at two state sizes.

    .venv/bin/python benchmarks/standby_bench.py [--sizes 100M,10G] [--files 60] [--rounds 3]

One private stack (a Kafka broker) in `.bench/standby`; the "DR cluster" is the same broker
under another topic name, fed by a faithful copier (partition, key, value, headers and
timestamp, as MirrorMaker 2 keeps them): translation costs the same per partition either
way. For each size, a synthetic checkpoint in Spark's layout (HDFS-backed state: `--files`
state files, 3 versions per partition, of random bytes summing to the size; three batches
of offsets naming a 3-partition topic) is snapshotted with Kafka anchors into a local store
(the DR store). The standby is materialised from that snapshot (`update_standby`, timed, in
no ratio), then brought by an **incremental update** to a second snapshot one batch later
(a 64 KiB delta per state partition), and the checkpoint is deleted. Then, in the same run,
timed on that snapshot:

* **restore at failover** (today): `engine.dr.failover` into a new, empty directory: choose and
  translate, restore every byte (hashed, fsynced), rewrite the offsets, publish. The target
  is deleted after each round;
* **failover from a current standby**: `failover(..., standby=True)`: choose and
  translate, verify the standby (`checksums`: each file's sha256 recorded as it was written,
  trusted while the filesystem gives it the same version), rewrite the offset files in place,
  promote. Between rounds the promotion is undone (the offset files and the records put
  back as they were: only those files' versions differ from what the update left, and a
  promotion writes them anyway);
* the same with `verify_standby="full"` (every byte of the standby read and hashed), once.

The page cache is whatever the machine has (the standby's files were just written). Figures
are medians of `--rounds`; raw ones in `.bench/standby_results.json`. A size that does not
fit the free space (about 3.2x the size) is skipped and said so.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from bench_common import WORK, MiB  # this folder is on sys.path; it puts the repo there too

from dev import stack as stack_mod

STATE_DIR = WORK / "standby"
PARTITIONS = 3
PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else int(text)


def produce_and_mirror(bootstrap: str, topic: str, dr_topic: str, records: int) -> dict[str, int]:
    """`records` records in `topic`, copied record by record into `dr_topic`; the end offsets."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    from airflow_provider_streamstate.jobs.generator import ensure_topic

    ensure_topic(bootstrap, topic, partitions=PARTITIONS)
    ensure_topic(bootstrap, dr_topic, partitions=PARTITIONS)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(records):
        producer.produce(topic, key=f"k{i}".encode(), value=json.dumps({"i": i}).encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "copier", "enable.auto.commit": False,
                         "log_level": 0})
    ends = {}
    for p in range(PARTITIONS):
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        ends[str(p)] = int(high)
        consumer.assign([TopicPartition(topic, p, low)])
        copied = low
        while copied < high:
            for m in consumer.consume(500, timeout=5):
                assert m.error() is None, m.error()
                producer.produce(dr_topic, key=m.key(), value=m.value(), headers=m.headers(), partition=p,
                                 timestamp=m.timestamp()[1])
                copied = m.offset() + 1
    assert producer.flush(30) == 0
    consumer.close()
    return ends


def write_checkpoint(root: Path, topic: str, ends: dict[str, int], size: int, files: int) -> None:
    """Spark's layout, HDFS-backed state of `files` state files of random bytes (`size` in all)."""
    root.mkdir(parents=True)
    (root / "metadata").write_text(json.dumps({"id": "6f02b52d-c2f2-49ac-9550-b9c4303a0417"}))
    (root / "sources/0").mkdir(parents=True)
    (root / "sources/0/0").write_text("v1\n" + json.dumps({topic: {p: 0 for p in ends}}))
    (root / "offsets").mkdir()
    (root / "commits").mkdir()
    conf = {"spark.sql.streaming.stateStore.providerClass": PROVIDER}
    for b in range(3):
        offsets = {p: (o * (b + 1)) // 3 for p, o in ends.items()}
        meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1000 + b, "conf": conf}
        (root / f"offsets/{b}").write_text(f"v1\n{json.dumps(meta)}\n{json.dumps({topic: offsets})}")
        (root / f"commits/{b}").write_text("v1\n" + json.dumps({"nextBatchWatermarkMs": 0}))
    parts = max(1, files // 3)  # three state versions per partition: batch 2's cut holds them all
    info = [{"storeName": "default", "numColsPrefixKey": 0, "numPartitions": parts}]
    (root / "state/0/_metadata").mkdir(parents=True)
    (root / "state/0/_metadata/metadata").write_text(
        "v1\n" + json.dumps({"operatorInfo": {"operatorId": 0, "operatorName": "stateStoreSave"},
                             "stateStoreInfo": info}))
    per_file = size // (parts * 3)
    block = random.Random(7).randbytes(max(1, min(per_file, 64 * MiB)))
    n = 0
    for p in range(parts):
        d = root / f"state/0/{p}"
        d.mkdir()
        for v in (1, 2, 3):
            with open(d / f"{v}.delta", "wb") as f:
                f.write(f"file {n}\n".encode())  # every file distinct: one blob each
                left = per_file
                while left > 0:
                    f.write(block[: min(left, len(block))])
                    left -= len(block)
            n += 1


def next_batch(root: Path) -> None:
    """Batch 3: its logs, and a 64 KiB delta (state version 4) in every partition."""
    (root / "offsets/3").write_text((root / "offsets/2").read_text())
    (root / "commits/3").write_text((root / "commits/2").read_text())
    for d in sorted(p for p in (root / "state/0").iterdir() if p.name.isdigit()):
        (d / "4.delta").write_bytes(os.urandom(64 << 10))


def undo_promotion(standby: Path, saved: dict[str, bytes]) -> None:
    """Put back what the promotion wrote (the offset files, the records): the standby as an
    update left it."""
    shutil.rmtree(standby / "_streamstate")
    for rel, data in saved.items():
        (standby / rel).parent.mkdir(parents=True, exist_ok=True)
        (standby / rel).write_bytes(data)


def saved_files(standby: Path) -> dict[str, bytes]:
    wanted = [p for p in standby.rglob("*") if p.is_file() and (
        p.relative_to(standby).parts[0] in ("offsets", "sources", "_streamstate"))]
    return {p.relative_to(standby).as_posix(): p.read_bytes() for p in wanted}


def one_size(stack: Any, size: int, files: int, rounds: int, work: Path) -> dict[str, Any]:
    import uuid

    from airflow_provider_streamstate.backends.local.store import LocalStore
    from airflow_provider_streamstate.engine.dr.failover import TopicMap, failover
    from airflow_provider_streamstate.engine.dr.standby import update_standby
    from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot

    bootstrap = stack.kafka_bootstrap
    topic, dr_topic = f"bench-{uuid.uuid4().hex[:8]}", f"dr-{uuid.uuid4().hex[:8]}"
    ends = produce_and_mirror(bootstrap, topic, dr_topic, 3000)
    topic_map = TopicMap.parse([f"{topic}={dr_topic}"])
    out: dict[str, Any] = {"bytes": size, "files": files}
    t = time.monotonic()
    write_checkpoint(work / "ckpt", topic, ends, size, files)
    out["build_s"] = round(time.monotonic() - t, 2)
    store = LocalStore(work / "store")
    t = time.monotonic()
    snap = create_snapshot(str(work / "ckpt"), store, "bench", kafka_bootstrap=bootstrap)
    out["snapshot_s"] = round(time.monotonic() - t, 2)
    assert not snap.anchor_problems, snap.anchor_problems

    standby = work / "standby"
    t = time.monotonic()
    first = update_standby(store, "bench", standby)
    out["standby_materialise_s"] = round(time.monotonic() - t, 2)
    assert first.files_written == len(snap.manifest.files)
    next_batch(work / "ckpt")
    second = create_snapshot(str(work / "ckpt"), store, "bench", kafka_bootstrap=bootstrap).manifest
    out["snapshot_files"] = len(second.files)
    shutil.rmtree(work / "ckpt")
    inc = update_standby(store, "bench", standby)
    out["incremental_update"] = {"s": round(inc.seconds, 3), "files_written": inc.files_written,
                                 "bytes_written": inc.bytes_written, "files_kept": inc.files_kept}

    restore_s = []
    for r in range(rounds):
        target = work / f"restored-{r}"
        t = time.monotonic()
        res = failover(store, "bench", target, bootstrap, topic_map=topic_map)
        restore_s.append(time.monotonic() - t)
        assert res.standby is None and res.rewritten and res.snapshot_id == inc.snapshot_id
        shutil.rmtree(target)
    saved = saved_files(standby)
    standby_s, parts = [], []
    for _ in range(rounds):
        t = time.monotonic()
        res = failover(store, "bench", standby, bootstrap, topic_map=topic_map, standby=True)
        standby_s.append(time.monotonic() - t)
        assert res.standby is not None and res.standby.usable and res.standby.files_read == 0, res.standby
        parts.append({"choose": res.seconds_choose, "verify": res.standby.seconds, "rewrite": res.seconds_rewrite})
        undo_promotion(standby, saved)
    t = time.monotonic()
    res = failover(store, "bench", standby, bootstrap, topic_map=topic_map, standby=True, verify_standby="full")
    out["standby_full_verify_failover_s"] = round(time.monotonic() - t, 3)
    assert res.standby is not None and res.standby.usable and res.standby.bytes_read > 0

    out["restore_failover_s"] = [round(s, 3) for s in restore_s]
    out["standby_failover_s"] = [round(s, 3) for s in standby_s]
    out["standby_parts_s"] = [{k: round(v, 3) for k, v in p.items()} for p in parts]
    out["restore_failover_median_s"] = round(statistics.median(restore_s), 3)
    out["standby_failover_median_s"] = round(statistics.median(standby_s), 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="100M,10G")
    ap.add_argument("--files", type=int, default=60, help="state files (3 per partition)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    shutil.rmtree(STATE_DIR / "work", ignore_errors=True)
    stack = stack_mod.up(STATE_DIR / "stack")
    results: dict[str, Any] = {"sizes": {}, "skipped": [], "load_before": os.getloadavg()}
    try:
        for size in sizes:
            free = shutil.disk_usage(WORK).free
            if free < 3.2 * size + (4 << 30):
                results["skipped"].append({"bytes": size, "free_bytes": free})
                print(f"skipping {size} bytes: {free} bytes free, about {3.2 * size:.0f} needed")
                continue
            work = STATE_DIR / "work" / str(size)
            try:
                results["sizes"][str(size)] = one_size(stack, size, args.files, args.rounds, work)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            print(json.dumps(results["sizes"][str(size)]), flush=True)
    finally:
        stack_mod.down(STATE_DIR / "stack")
    results["load_after"] = os.getloadavg()
    measured = list(results["sizes"].values())
    if len(measured) >= 2:
        small, big = measured[0], measured[-1]
        results["standby_big_over_small"] = round(big["standby_failover_median_s"] / small["standby_failover_median_s"],
                                                  2)
        results["restore_big_over_small"] = round(big["restore_failover_median_s"] / small["restore_failover_median_s"],
                                                  2)
    WORK.mkdir(parents=True, exist_ok=True)
    (WORK / "standby_results.json").write_text(json.dumps(results, indent=1))
    print("| state | files | restore at failover (s) | failover from a current standby (s) | restore / standby |"
          " standby, full verification (s) | materialise the standby (s) | incremental update after a batch |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in measured:
        inc = r["incremental_update"]
        print(f"| {r['bytes'] / MiB:,.0f} MiB | {r['snapshot_files']} | {r['restore_failover_median_s']} | "
              f"{r['standby_failover_median_s']} | "
              f"{r['restore_failover_median_s'] / r['standby_failover_median_s']:.1f}x | "
              f"{r['standby_full_verify_failover_s']} | {r['standby_materialise_s']} | "
              f"{inc['files_written']} files, {inc['bytes_written'] / MiB:,.1f} MiB in {inc['s']} s |")
    for k in ("standby_big_over_small", "restore_big_over_small"):
        if k in results:
            print(f"{k}: {results[k]}")


if __name__ == "__main__":
    main()
