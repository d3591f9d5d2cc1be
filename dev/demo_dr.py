"""`make demo-dr`: a disaster-recovery drill of the example stream, run by Airflow.

On a private region pair under `.stack/dr-demo` (a primary Kafka broker and S3 endpoint, a
DR Kafka cluster fed by a real MirrorMaker 2, a DR S3 endpoint):

1. `streamstate_demo_start` runs the example stream in the primary region;
2. input arrives in rounds from a transactional producer (its commit markers make DR
   offsets differ from the primary's); after each round `streamstate_scheduled_snapshot`
   takes a snapshot with Kafka anchors and replicates it to the DR store;
3. one more round arrives after the last snapshot; once it is mirrored, the primary region
   dies: the stream's driver, the primary broker and the primary S3 endpoint get SIGKILL;
4. `streamstate_dr_failover` fences the primary, picks the newest snapshot the mirror can
   resume exactly, translates its offsets for the DR cluster, starts the stream there and
   waits until it is caught up; its report gives RTO (with its parts) and RPO;
5. new input arrives in the DR cluster and the DR stream reads it.

It ends with checks: the DR stream's state equals the generator's expected aggregates over
every event (nothing lost, nothing counted twice) and it resumed with the batch after the
snapshot's. Exit code 0 only when all hold. `--policy identity` mirrors under the same topic
names; `--keep-stack` leaves the region pair up (`dev/stack.py down --state-dir .stack/dr-demo`).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dev import airflow_home  # noqa: E402
from dev import stack as stack_mod  # noqa: E402
from dev.console import quiet, say  # noqa: E402
from dev.demo import DEMO_DAGS, HOME, count_messages, run  # noqa: E402

STATE_DIR = REPO / ".stack" / "dr-demo"
STREAM = "demo-accounts"


def wait_until(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(1)


def consumed(checkpoint: str) -> int:
    from airflow_provider_streamstate.engine.streams.health import committed_kafka_offsets

    found = committed_kafka_offsets(checkpoint)
    return sum(sum(p.values()) for p in found[1].values()) if found else 0


def end_offsets(bootstrap: str, topic: str) -> int:
    from airflow_provider_streamstate.engine.kafka.offsets import broker_offsets

    return sum(p.latest for p in broker_offsets(bootstrap, {topic: {"0": 0, "1": 0, "2": 0}}))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--policy", choices=sorted(stack_mod.MM2_POLICIES), default="default",
                   help="MirrorMaker 2's naming in DR (default: primary.<topic>; identity: the same)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--events-per-round", type=int, default=1000)
    p.add_argument("--accounts", type=int, default=100)
    p.add_argument("--keep-stack", action="store_true")
    args = p.parse_args(argv)

    airflow_home.configure_env(HOME)  # before anything imports Airflow
    log = quiet(HOME / "demo-logs" / "demo-dr.log")
    say(f"the drill's own lines follow; Airflow, Spark and the stack write to {log.relative_to(REPO)}")
    t0 = time.monotonic()
    say(f"starting the region pair in {STATE_DIR.relative_to(REPO)}: primary Kafka + S3, DR Kafka + S3, "
          f"MirrorMaker 2 ({args.policy} policy) ...", flush=True)
    stack_mod.down(STATE_DIR)  # a drill starts from a clean pair
    primary = stack_mod.up(STATE_DIR)
    dr = stack_mod.start_dr_kafka(STATE_DIR, primary.kafka_bootstrap, policy=args.policy)
    say(f"  primary kafka {primary.kafka_bootstrap}, DR kafka {dr.bootstrap}")
    work = STATE_DIR / "work"
    try:
        return _drill(args, primary, dr, work, t0)
    except Exception as exc:
        say(f"drill failed: {type(exc).__name__}: {exc} (the traceback is in {log.relative_to(REPO)})")
        raise
    finally:
        from airflow_provider_streamstate.engine.streams import launcher

        for ckpt in (work / "primary-checkpoint", work / "dr-checkpoint"):
            if ckpt.exists():
                launcher.stop(str(ckpt), timeout_s=60)  # never leave a driver behind
        if not args.keep_stack:
            stack_mod.down(STATE_DIR)


def _drill(args: argparse.Namespace, primary: Any, dr: Any, work: Path, t0: float) -> int:
    import shutil

    from airflow_provider_streamstate.engine.state.spark import read_state, spark_session
    from airflow_provider_streamstate.engine.streams import launcher, records
    from airflow_provider_streamstate.jobs import example_stream
    from airflow_provider_streamstate.jobs.generator import (
        GeneratorSpec,
        ensure_topic,
        expected_aggregates,
        messages,
        produce,
    )
    from airflow_provider_streamstate.spec import StreamSpec

    say(f"preparing Airflow in {HOME.relative_to(REPO)} ...", flush=True)
    airflow_home.prepare(HOME, DEMO_DAGS, refresh=True)
    log_dir = HOME / "demo-logs"
    log_dir.mkdir(exist_ok=True)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    run_id = time.strftime("%Y%m%d%H%M%S")
    source = f"demo-transactions-{run_id}"
    dr_source = dr.dr_topic(source)
    ensure_topic(primary.kafka_bootstrap, source, partitions=3)
    for env in (primary.airflow_conn_env("primary", "aws_primary"), primary.airflow_conn_env("dr", "aws_dr")):
        os.environ.update(env)
    os.environ["AIRFLOW_CONN_SPARK_DEMO"] = json.dumps({"conn_type": "spark", "host": "local[2]"})
    for name, bootstrap in (("KAFKA_PRIMARY", primary.kafka_bootstrap), ("KAFKA_DR", dr.bootstrap)):
        os.environ[f"AIRFLOW_CONN_{name}"] = json.dumps({"conn_type": "kafka",
                                                          "extra": {"bootstrap.servers": bootstrap}})

    def spec_in(region: str, bootstrap: str, topic: str, kafka_conn: str, aws_conn: str) -> StreamSpec:
        s3 = primary.s3[region]
        return StreamSpec(
            name=STREAM, application=example_stream.__file__,
            application_args=["--bootstrap-servers", bootstrap, "--checkpoint", "{checkpoint}", "--source-topic",
                              topic, "--alerts-topic", "{sinks[alerts]}", "--trigger", "processing:2 seconds"],
            checkpoint=str(work / f"{region}-checkpoint"), store=f"s3://{s3['bucket']}/dr-demo-{run_id}",
            storage_conn_id=aws_conn, kafka_conn_id=kafka_conn, spark_conn_id="spark_demo", jars=list(primary.spark_jars),
            conf={"spark.ui.enabled": "false", "spark.driver.host": "127.0.0.1",
                  "spark.driver.bindAddress": "127.0.0.1"},
            sinks={"alerts": f"{topic}-alerts"}, heartbeat_interval_s=2.0,
        )

    in_primary = spec_in("primary", primary.kafka_bootstrap, source, "kafka_primary", "aws_primary")
    in_dr = spec_in("dr", dr.bootstrap, dr_source, "kafka_dr", "aws_dr")
    say(f"\nstream {STREAM} in the primary region: snapshots to {in_primary.store} (primary S3), replicated "
          f"to {in_dr.store} (DR S3); {source} mirrored to {dr_source} in DR")
    if run("streamstate_demo_start", {"stream": in_primary.to_dict()}, log_dir).state != "success":
        return 1

    specs: list[GeneratorSpec] = []
    gen = GeneratorSpec(seed=43, accounts=args.accounts, events=args.events_per_round, duplicate_rate=0.05)
    for i in range(args.rounds):
        sent = produce(primary.kafka_bootstrap, source, gen, rate=1000, per_transaction=50)
        specs.append(gen)
        gen = gen.next_round()
        say(f"\nround {i + 1}/{args.rounds}: produced {sent} transactions (in Kafka transactions of 50)")
        wait_until(lambda: consumed(in_primary.checkpoint) >= end_offsets(primary.kafka_bootstrap, source), 180,
                   "the primary stream to read the round")
        run("streamstate_scheduled_snapshot", {"streams": [in_primary.to_dict()], "dr_store": in_dr.store,
                                               "dr_storage_conn_id": "aws_dr"}, log_dir)

    sent = produce(primary.kafka_bootstrap, source, gen, rate=1000, per_transaction=50)
    specs.append(gen)
    mirrored = sum(s.events for s in specs)
    wanted = sum(1 for s in specs for _ in messages(s))  # duplicates included
    say(f"\none more round after the last snapshot: {sent} transactions; waiting for the mirror ...")
    wait_until(lambda: count_messages(dr.bootstrap, dr_source) >= wanted, 180, "MirrorMaker 2 to mirror it")
    say(f"  DR holds all {wanted} messages ({mirrored} transactions)")

    # What the DR side cannot count but the drill can: events the primary accepted that never
    # reached the mirror (RPO), taken at the moment the region dies.
    lost = wanted - count_messages(dr.bootstrap, dr_source)
    handle = records.read_launch(in_primary.checkpoint).handle
    os.killpg(handle.pid, signal.SIGKILL)
    stack_mod.kill_part(STATE_DIR, "primary-kafka")
    stack_mod.kill_part(STATE_DIR, "primary-s3")
    say("\nthe primary region dies: SIGKILL to the stream's driver, the primary broker and the primary S3 endpoint")

    failover = run("streamstate_dr_failover", {
        "stream": in_dr.to_dict(), "primary": in_primary.to_dict(), "replication_policy": dr.policy,
        "source_alias": dr.source_alias, "max_lag": 0,
    }, log_dir)
    if failover.state != "success":
        say(failover.log[-3000:])
        return 1
    report = failover.tasks["report"].xcom or {}
    restored = failover.tasks["failover"].xcom or {}
    for line in report.get("lines", []):
        say(f"  {line}")

    after = gen.next_round()
    specs.append(after)
    produce(dr.bootstrap, dr_source, after, rate=1000, per_transaction=50)
    say(f"\nnew input in the DR cluster: {after.events} transactions into {dr_source}")
    wait_until(lambda: consumed(in_dr.checkpoint) >= end_offsets(dr.bootstrap, dr_source), 180,
               "the DR stream to read it")
    launcher.stop(in_dr.checkpoint, timeout_s=60)

    spark = spark_session("streamstate-dr-demo-check", primary.spark_jars)
    state = {r.key.account: r.value.asDict() for r in read_state(spark, in_dr.checkpoint, operatorId=0).collect()}
    spark.stop()
    commits = sorted(int(f.name) for f in Path(in_dr.checkpoint, "commits").iterdir() if f.name.isdigit())
    resumed = [c for c in commits if c > restored.get("batch_id", -1)]
    summary = {
        "failover_dag_succeeded": failover.state == "success",
        "snapshot_used": restored.get("snapshot_id"),
        "resumed_with_next_batch": bool(resumed) and resumed[0] == restored.get("batch_id", -2) + 1,
        "replayed_from_mirror": restored.get("events_behind"),
        "rto_first_dr_batch_s": report.get("rto_first_batch_s"),
        "rto_caught_up_s": report.get("rto_caught_up_s"),
        "rpo_events": lost,  # produced to the primary minus mirrored, at the kill
        "state_matches_generator": state == expected_aggregates(specs),
        "seconds": round(time.monotonic() - t0, 1),
    }
    say("\nsummary")
    for key, value in summary.items():
        say(f"  {key:26} {value}")
    say("  (rpo_events: messages the primary accepted that the mirror did not hold when the region died; the "
          "drill knows it, a real failover cannot count it from the DR side)")
    return 0 if all(summary[k] for k in ("failover_dag_succeeded", "resumed_with_next_batch",
                                         "state_matches_generator")) else 1


if __name__ == "__main__":
    sys.exit(main())
