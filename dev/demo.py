"""`make demo`: the example stateful stream on the local stack, end to end.

Starts the stack (Kafka broker, two S3 regions), runs the example stream on generated
transactions, snapshots it into the `primary` S3 store while it runs, restores the
newest snapshot as a clone and checks it holds exactly Spark's state at that batch.
Run with `--keep-stack` to leave the stack up afterwards (`dev/stack.py down` stops it).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dev import stack as stack_mod  # noqa: E402


def count_messages(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    if topic not in md.topics or md.topics[topic].error is not None:
        return 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "streamstate-demo"})
    total = 0
    for p in md.topics[topic].partitions:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        total += high - low
    consumer.close()
    return total


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--events-per-round", type=int, default=1500)
    p.add_argument("--accounts", type=int, default=200)
    p.add_argument("--keep-stack", action="store_true")
    args = p.parse_args(argv)

    import boto3

    from airflow_provider_streamstate.engine.restore import restore_snapshot
    from airflow_provider_streamstate.engine.snapshot import create_snapshot
    from airflow_provider_streamstate.engine.stores import S3Store
    from airflow_provider_streamstate.engine.verify import verify_snapshots
    from airflow_provider_streamstate.jobs.example_stream import StreamArgs, start_query
    from airflow_provider_streamstate.jobs.generator import (
        GeneratorSpec,
        ensure_topic,
        expected_aggregates,
        produce,
    )
    from airflow_provider_streamstate.jobs.runtime import read_state, spark_session

    t0 = time.monotonic()
    print("starting the local stack (Kafka KRaft broker, S3 primary + dr) ...", flush=True)
    stack = stack_mod.up()
    print(f"  kafka {stack.kafka_bootstrap}; s3 primary {stack.s3['primary']['endpoint_url']}, dr {stack.s3['dr']['endpoint_url']}")
    work = REPO / ".stack" / "demo"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    run = time.strftime("%Y%m%d%H%M%S")
    source, alerts = f"demo-transactions-{run}", f"demo-alerts-{run}"
    ensure_topic(stack.kafka_bootstrap, source, partitions=3)
    ensure_topic(stack.kafka_bootstrap, alerts, partitions=1)

    # Alert on accounts whose total passes 1.2x the mean (amounts average 50,000 cents).
    threshold = int(args.events_per_round * args.rounds / args.accounts * 50_000 * 1.2)
    spark = spark_session("streamstate-demo", stack.spark_jars)
    checkpoint = str(work / "checkpoint")
    stream = StreamArgs(stack.kafka_bootstrap, checkpoint, source_topic=source, alerts_topic=alerts,
                        trigger="processing:2 seconds", threshold_cents=threshold)
    query = start_query(spark, stream)
    print(f"example stream running (RocksDB state store, changelog checkpointing), checkpoint {checkpoint}")

    specs = []
    spec = GeneratorSpec(seed=42, accounts=args.accounts, events=args.events_per_round, duplicate_rate=0.05)
    producer_error: list[BaseException] = []

    def feed() -> None:
        nonlocal spec
        try:
            for i in range(args.rounds):
                sent = produce(stack.kafka_bootstrap, source, spec, rate=250)
                specs.append(spec)
                print(f"  round {i + 1}/{args.rounds}: produced {sent} messages", flush=True)
                spec = spec.next_round()
        except BaseException as exc:  # reported below
            producer_error.append(exc)

    s3 = stack.s3["primary"]
    store = S3Store(
        boto3.client("s3", endpoint_url=s3["endpoint_url"], region_name=s3["region"],
                     aws_access_key_id=stack_mod.S3_ACCESS_KEY, aws_secret_access_key=stack_mod.S3_SECRET_KEY),
        s3["bucket"], f"demo-{run}",
    )
    print(f"snapshots go to {store.url} on the primary S3 endpoint")
    snapshots: list = []

    def snapshot_if_new_batch() -> None:
        progress = query.lastProgress
        if progress and (not snapshots or progress["batchId"] > snapshots[-1].manifest.batch_id):
            snap = create_snapshot(checkpoint, store, "demo-accounts", labels={"source": "make-demo"})
            snapshots.append(snap)
            print(f"  snapshot {snap.manifest.snapshot_id}: batch {snap.manifest.batch_id}, "
                  f"{len(snap.manifest.files)} files, uploaded {snap.bytes_uploaded} of {snap.manifest.bytes_total} bytes "
                  f"in {snap.seconds:.2f}s", flush=True)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    while not query.lastProgress:  # Spark's first batch includes its warm-up
        time.sleep(0.5)
    while feeder.is_alive():
        snapshot_if_new_batch()
        time.sleep(2)
    feeder.join()
    if producer_error:
        raise producer_error[0]
    query.processAllAvailable()
    snapshot_if_new_batch()
    query.stop()

    commits = sorted(int(f.name) for f in Path(checkpoint, "commits").iterdir() if f.name.isdigit())
    state = {r.key.account: r.value.asDict() for r in read_state(spark, checkpoint, operatorId=0).collect()}
    expected = expected_aggregates(specs)
    out_records = count_messages(stack.kafka_bootstrap, alerts)

    newest = snapshots[-1].manifest
    clone = work / "clone"
    restored = restore_snapshot(store, "demo-accounts", newest.snapshot_id, clone, new_query_id=True)
    print(f"restored {newest.snapshot_id} as a clone at {clone} (new query id {restored.query_id})")
    at_n = {r.key.account: r.value.asDict() for r in read_state(spark, checkpoint, operatorId=0, batchId=newest.batch_id).collect()}
    cloned = {r.key.account: r.value.asDict() for r in read_state(spark, str(clone), operatorId=0, batchId=newest.batch_id).collect()}
    verified = verify_snapshots(store, "demo-accounts")
    summary = {
        "batches_committed": len(commits),
        "last_batch_id": commits[-1] if commits else None,
        "keys_in_state": len(state),
        "state_matches_generator": state == expected,
        "input_messages": count_messages(stack.kafka_bootstrap, source),
        "output_records": out_records,
        "snapshots_taken": len(snapshots),
        "snapshot_bytes_uploaded": sum(x.bytes_uploaded for x in snapshots),
        "clone_matches_batch_state": cloned == at_n,
        "store_verified": verified.ok,
        "seconds": round(time.monotonic() - t0, 1),
    }
    print("\nsummary")
    for key, value in summary.items():
        print(f"  {key:24} {value}")
    spark.stop()
    if not args.keep_stack:
        stack_mod.down()
    else:
        print(json.dumps(stack.to_json()))
    ok = summary["state_matches_generator"] and summary["clone_matches_batch_state"] and verified.ok
    return 0 if ok and summary["batches_committed"] >= 3 else 1


if __name__ == "__main__":
    sys.exit(main())
