"""`make demo`: the example stateful stream run and looked after by Airflow, end to end.

Starts the local stack (Kafka broker, two S3 regions) and an Airflow home under
`.stack/airflow` (SQLite; `PATH=$PWD/.venv/bin:$PATH AIRFLOW_HOME=$PWD/.stack/airflow
airflow standalone` shows the runs afterwards), then runs the DAGs with Airflow's own runner (`dag.test()`):

1. `streamstate_demo_start`: spark-submit the example stream (detached) and wait, deferred,
   for its first batch;
2. while transactions arrive in rounds, `streamstate_scheduled_snapshot` after each round
   (a consistent snapshot into the `primary` S3 store);
3. the driver is killed with SIGKILL midway, and `streamstate_supervisor` restarts it;
4. a full `streamstate_scheduled_snapshot` round: validate with a GX suite, replicate to the
   `dr` S3 store (with its replication lag), retention in both stores;
5. `streamstate_demo_clone_and_stop`: clone the newest snapshot, stop the stream;
6. `streamstate_deploy_gate`: a candidate job on a clone of the latest known-good snapshot,
   validated and diffed against production (prints the GX Data Docs path).

It prints each run's tasks and the stream's progress, and ends with checks: the stream's
state equals the generator's expected aggregates, the clone holds exactly Spark's state at
the snapshot's batch, and every snapshot verifies. Exit code 0 only when all hold.
`--keep-stack` leaves the stack up (`dev/stack.py down` stops it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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

HOME = REPO / ".stack" / "airflow"
DEMO_DAGS = sorted((REPO / "dev" / "demo_dags").glob("*.py"))
STREAM = "demo-accounts"
# The data-quality rules the demo's snapshots and the deploy gate's clone must pass.
DEMO_SUITE = {
    "name": "accounts-sane",
    "meta": {"streamstate": {"operator": "stateStoreSave"}},
    "expectations": [
        {"type": "expect_column_values_to_be_between", "kwargs": {"column": "value_max", "min_value": 1,
                                                                  "max_value": 100000}},
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "key_account"}},
    ],
}


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


def _short(value: Any) -> str:
    """A task's XCom, on one line, trimmed to the keys a reader cares about."""
    if isinstance(value, list):
        return f"{len(value)} stream(s): {', '.join(str(v.get('name', '?')) for v in value if isinstance(v, dict))}"
    if not isinstance(value, dict):
        return "" if value is None else json.dumps(value, default=str)[:100]
    keep = ("snapshot_id", "batch_id", "reused", "bytes_uploaded", "bytes_copied", "action", "state_before",
            "restored_snapshot", "pid", "reconnected", "outcome", "success", "deploy", "changed_keys",
            "snapshots_kept", "snapshots_deleted", "blobs_deleted", "clones_expired", "seconds", "clone",
            "expires_at", "new", "actions", "state")

    def shown(v: Any) -> Any:
        return f"[{len(v)}]" if isinstance(v, list | dict) and len(str(v)) > 60 else v

    return ", ".join(f"{k}={shown(value[k])}" for k in keep if k in value and value[k] is not None)


def run(dag_id: str, conf: dict[str, Any], log_dir: Path) -> airflow_home.DagResult:
    """One DAG run; its tasks on stdout, its full log in `log_dir`."""
    t0 = time.monotonic()
    result = airflow_home.run_dag(dag_id, conf, DEMO_DAGS)
    log = log_dir / f"{time.strftime('%H%M%S')}-{dag_id}.log"
    log.write_text(result.log)
    say(f"  DAG {dag_id}: {result.state} in {time.monotonic() - t0:.0f}s (log {log.relative_to(REPO)})")
    for task_id, task in result.tasks.items():
        if f"{task_id}[0]" in result.tasks:
            continue  # a mapped task: its instances are listed
        took = f" {task.seconds:.1f}s" if task.seconds is not None else ""
        say(f"    {task_id:22} {task.state or '-':8}{took:>7}  {_short(task.xcom)}")
    return result


def progress_line(checkpoint: str, bootstrap_offsets: Any) -> str:
    from airflow_provider_streamstate.engine.streams import launcher
    from airflow_provider_streamstate.engine.streams.health import check_lag

    st = launcher.status(checkpoint)
    try:
        lag = check_lag(checkpoint, max_lag=0, broker_offsets=bootstrap_offsets)
        behind = f"batch {lag.batch_id}, {lag.total_lag} records behind"
    except Exception as exc:  # noqa: BLE001 - a progress line must not stop the demo
        behind = f"no committed batch yet ({type(exc).__name__})"
    return f"  stream {STREAM}: {st.state}, {behind}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--events-per-round", type=int, default=1500)
    p.add_argument("--accounts", type=int, default=200)
    p.add_argument("--keep-stack", action="store_true")
    args = p.parse_args(argv)
    if args.rounds < 2:
        p.error("--rounds must be at least 2 (the driver is killed after the first)")

    airflow_home.configure_env(HOME)  # before anything imports Airflow
    log = quiet(HOME / "demo-logs" / "demo.log")
    say(f"the demo's own lines follow; Airflow, Spark and the stack write to {log.relative_to(REPO)}")
    t0 = time.monotonic()
    say("starting the local stack (Kafka KRaft broker, S3 primary + dr) ...", flush=True)
    stack = stack_mod.up()
    say(f"  kafka {stack.kafka_bootstrap}; s3 primary {stack.s3['primary']['endpoint_url']}")
    try:
        return _demo(args, stack, t0)
    except Exception as exc:
        say(f"demo failed: {type(exc).__name__}: {exc} (the traceback is in {log.relative_to(REPO)})")
        raise
    finally:
        from airflow_provider_streamstate.engine.streams import launcher

        work = REPO / ".stack" / "demo"
        if (work / "checkpoint").exists():
            launcher.stop(str(work / "checkpoint"), timeout_s=60)  # never leave the driver behind
        if not args.keep_stack:
            stack_mod.down()
        else:
            say(json.dumps(stack.to_json()))


def _demo(args: argparse.Namespace, stack: Any, t0: float) -> int:
    from airflow_provider_streamstate.engine.catalog.snapshots import list_snapshots
    from airflow_provider_streamstate.engine.catalog.verify import verify_snapshots
    from airflow_provider_streamstate.engine.kafka.offsets import broker_offsets
    from airflow_provider_streamstate.engine.state.spark import read_state, spark_session
    from airflow_provider_streamstate.engine.stores import open_store
    from airflow_provider_streamstate.jobs import example_stream
    from airflow_provider_streamstate.jobs.generator import (
        GeneratorSpec,
        ensure_topic,
        expected_aggregates,
        produce,
    )
    from airflow_provider_streamstate.spec import StreamSpec

    say(f"preparing Airflow in {HOME.relative_to(REPO)} (SQLite metadata DB, DAGs: dags/ + dev/demo_dags/) ...",
          flush=True)
    airflow_home.prepare(HOME, DEMO_DAGS, refresh=True)
    # This process's Spark session, made first with the Kafka connector: the DAG tasks that
    # run here (validation) and the pipeline demo at the end share it (one per process).
    spark_session("streamstate-demo-check", stack.spark_jars)
    log_dir = HOME / "demo-logs"
    log_dir.mkdir(exist_ok=True)

    work = REPO / ".stack" / "demo"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    run_id = time.strftime("%Y%m%d%H%M%S")
    source, alerts = f"demo-transactions-{run_id}", f"demo-alerts-{run_id}"
    ensure_topic(stack.kafka_bootstrap, source, partitions=3)
    ensure_topic(stack.kafka_bootstrap, alerts, partitions=1)
    # Connections, as a deployment would define them (here: environment variables).
    os.environ.update(stack.airflow_conn_env("primary", "aws_demo"))
    os.environ["AIRFLOW_CONN_SPARK_DEMO"] = json.dumps({"conn_type": "spark", "host": "local[2]"})
    os.environ["AIRFLOW_CONN_KAFKA_DEMO"] = json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": stack.kafka_bootstrap}})

    # Alert on accounts whose total passes 1.2x the mean (amounts average 50,000 cents).
    threshold = int(args.events_per_round * args.rounds / args.accounts * 50_000 * 1.2)
    s3 = stack.s3["primary"]
    spec = StreamSpec(
        name=STREAM,
        application=example_stream.__file__,
        application_args=[
            "--bootstrap-servers", stack.kafka_bootstrap, "--checkpoint", "{checkpoint}", "--source-topic", source,
            "--alerts-topic", "{sinks[alerts]}", "--trigger", "processing:2 seconds",
            "--threshold-cents", str(threshold),
        ],
        checkpoint=str(work / "checkpoint"),
        store=f"s3://{s3['bucket']}/demo-{run_id}", storage_conn_id="aws_demo",
        kafka_conn_id="kafka_demo", spark_conn_id="spark_demo",
        jars=list(stack.spark_jars),
        conf={"spark.ui.enabled": "false", "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"},
        sinks={"alerts": alerts},
        heartbeat_interval_s=2.0,
    )
    stream = spec.to_dict()
    offsets = lambda o: broker_offsets(stack.kafka_bootstrap, o)  # noqa: E731
    say(f"stream {STREAM}: example stream (RocksDB state, changelog checkpointing), checkpoint "
          f"{Path(spec.checkpoint).relative_to(REPO)}, snapshots to {spec.store} on the primary S3 endpoint\n")

    result = run("streamstate_demo_start", {"stream": stream}, log_dir)
    if result.state != "success":
        say(result.log[-3000:])
        return 1

    specs: list[GeneratorSpec] = []
    gen = GeneratorSpec(seed=42, accounts=args.accounts, events=args.events_per_round, duplicate_rate=0.05)
    supervisor: airflow_home.DagResult | None = None
    for i in range(args.rounds):
        sent = produce(stack.kafka_bootstrap, source, gen, rate=500)
        specs.append(gen)
        gen = gen.next_round()
        say(f"\nround {i + 1}/{args.rounds}: produced {sent} transactions")
        time.sleep(4)  # a couple of triggers
        say(progress_line(spec.checkpoint, offsets))
        if i == 0:
            from airflow_provider_streamstate.engine.streams import records
            handle = records.read_launch(spec.checkpoint).handle
            os.killpg(handle.pid, signal.SIGKILL)
            say(f"  killed the stream's driver (SIGKILL to process group {handle.pid}), as a lost host would")
            time.sleep(1)
            supervisor = run("streamstate_supervisor", {"streams": [stream], "settle_seconds": 120}, log_dir)
            report = supervisor.tasks.get("supervise[0]")
            if report is not None and report.xcom:
                say(f"  supervisor: {report.xcom['message']}")
                for t in report.xcom["timings"]:
                    say(f"  recovery: launched in {t['launch_s']}s, query running after {t['spark_start_s']}s, "
                          f"first batch after {t['first_batch_s']}s")
        snap = run("streamstate_scheduled_snapshot", {"streams": [stream]}, log_dir)
        if snap.state != "success":
            say(snap.log[-3000:])

    total = sum(s.events for s in specs)
    deadline = time.monotonic() + 180
    from airflow_provider_streamstate.engine.streams.health import committed_kafka_offsets

    while time.monotonic() < deadline:
        found = committed_kafka_offsets(spec.checkpoint)
        if found and sum(sum(p.values()) for p in found[1].values()) >= count_messages(stack.kafka_bootstrap, source):
            break
        time.sleep(2)
    say("\nall input read:")
    say(progress_line(spec.checkpoint, offsets))
    # The full scheduled round: snapshot, validate with a GX suite, replicate to the DR
    # store (and wait until it is complete there), retention in both stores.
    suite = work / "accounts-sane.json"
    suite.write_text(json.dumps(DEMO_SUITE))
    dr = stack.s3["dr"]
    os.environ.update(stack.airflow_conn_env("dr", "aws_demo_dr"))
    dr_store = f"s3://{dr['bucket']}/demo-{run_id}"
    say(f"\nthe full scheduled round: validate with {suite.relative_to(REPO)}, replicate to {dr_store} (DR "
          "endpoint), retention keeping the newest 2 (and the newest known-good)")
    final_snapshot = run("streamstate_scheduled_snapshot", {
        "streams": [stream], "suite": str(suite), "dr_store": dr_store, "dr_storage_conn_id": "aws_demo_dr",
        "retention": {"keep_last": 2},
    }, log_dir)
    replicated = (final_snapshot.tasks.get("stream.replicate[0]") or final_snapshot.tasks.get("stream.replicate"))
    for s in ((replicated.xcom or {}).get("snapshots") or []) if replicated else []:
        say(f"  replicated {s['snapshot_id']} to DR: {s['bytes_copied']} bytes copied, "
              f"{s['bytes_skipped']} already there, replication lag {s['lag_seconds']}s")
    clone_checkpoint = work / "clone"
    clone = run("streamstate_demo_clone_and_stop", {
        "stream": stream, "clone_checkpoint": str(clone_checkpoint), "clone_sinks": {"alerts": f"{alerts}-sandbox"},
    }, log_dir)

    # The pre-deploy gate: the candidate (here: the same job, run to the end of the input)
    # on a clone of production's latest known-good snapshot, validated and diffed.
    candidate_args = [("available-now" if a.startswith("processing:") else a) for a in spec.application_args]
    gate = run("streamstate_deploy_gate", {
        "stream": stream, "candidate_application": example_stream.__file__, "candidate_args": candidate_args,
        "suite": str(suite), "snapshot": "latest-good:accounts-sane", "compare_snapshot": "latest",
        "clone_root": str(work / "gate"), "reports": str(work / "gate-reports"),
    }, log_dir)
    verdict = (gate.tasks.get("gate") and gate.tasks["gate"].xcom) or {}
    say(f"  deploy gate: {'PASS' if verdict.get('deploy') else 'BLOCKED'}; GX Data Docs: {verdict.get('data_docs')}")

    store = open_store(spec.store, connection=_s3_client(stack))
    listing = list_snapshots(store, STREAM)
    say(f"\nsnapshots of {STREAM} in {spec.store}:")
    for m in listing.manifests:
        say(f"  {m.snapshot_id}  batch {m.batch_id:>3}  {len(m.files):>4} files  {m.bytes_total:>9} bytes  "
              f"labels {dict(m.labels)}")
    newest = listing.manifests[-1]

    spark = spark_session("streamstate-demo-check", stack.spark_jars)
    commits = sorted(int(f.name) for f in Path(spec.checkpoint, "commits").iterdir() if f.name.isdigit())
    state = {r.key.account: r.value.asDict() for r in read_state(spark, spec.checkpoint, operatorId=0).collect()}
    at_n = {r.key.account: r.value.asDict()
            for r in read_state(spark, spec.checkpoint, operatorId=0, batchId=newest.batch_id).collect()}
    cloned = ({r.key.account: r.value.asDict()
               for r in read_state(spark, str(clone_checkpoint), operatorId=0, batchId=newest.batch_id).collect()}
              if (clone_checkpoint / "commits").exists() else None)
    pipeline = _pipeline_demo(spark, stack, work, log_dir, run_id)
    sessions = _sessions_demo(spark, stack, work, run_id)
    spark.stop()
    verified = verify_snapshots(store, STREAM)
    restarted = bool(supervisor and supervisor.tasks.get("supervise[0]") and
                     (supervisor.tasks["supervise[0]"].xcom or {}).get("action") == "restarted")
    summary = {
        "dag_runs_succeeded": all(r.state == "success" for r in (result, final_snapshot, clone)),
        "replicated_to_dr": bool(replicated and replicated.state == "success"),
        "deploy_gate_passed": bool(verdict.get("deploy")),
        "supervisor_restarted_it": restarted,
        "batches_committed": len(commits),
        "keys_in_state": len(state),
        "state_matches_generator": state == expected_aggregates(specs),
        "input_messages": total,
        "output_records": count_messages(stack.kafka_bootstrap, alerts),
        "snapshots_in_store": len(listing.manifests),  # after retention kept the newest 2
        "clone_matches_batch_state": cloned == at_n,
        "store_verified": verified.ok,
        **pipeline,
        **sessions,
        "seconds": round(time.monotonic() - t0, 1),
    }
    say("\nsummary")
    for key, value in summary.items():
        say(f"  {key:26} {value}")
    browsable = _browsable_copy(store, spec, work)
    say(f"\nthe stream's snapshots, copied to {browsable} so the Streams page shows them after the stack stops.")
    say("see the runs and the streams in the Airflow UI (docs/ui.md): "
        f"PATH=$PWD/.venv/bin:$PATH AIRFLOW_HOME=$PWD/{HOME.relative_to(REPO)} airflow standalone")
    say(f"then open the Streams page: {STREAMS_PAGE}")
    checks = ("dag_runs_succeeded", "supervisor_restarted_it", "replicated_to_dr", "deploy_gate_passed", "state_matches_generator", "clone_matches_batch_state",
              "store_verified", "pipeline_snapshot_dag_succeeded", "pipeline_restore_exact", "sessions_clone_exact")
    return 0 if all(summary[k] for k in checks) and len(commits) >= 3 else 1


STREAMS_PAGE = "http://localhost:8080/streamstate/streams"  # `airflow standalone`'s API server


def _browsable_copy(store: Any, spec: Any, work: Path) -> str:
    """The demo stream's snapshots (with their timelines and validations) in a local store,
    named by the Variable streamstate_streams: the S3 endpoints stop with the demo, the
    Streams page reads the stores the configuration names."""
    from airflow.models.variable import Variable

    from airflow_provider_streamstate.engine.lifecycle.replicate import replicate
    from airflow_provider_streamstate.engine.stores import open_store

    local = f"file://{work / 'snapshots'}"
    replicate(store, open_store(local), STREAM, all_missing=True)
    Variable.set("streamstate_streams", json.dumps([{**spec.to_dict(), "store": local, "storage_conn_id": None}]))
    return str((work / "snapshots").relative_to(REPO))


def _pipeline_demo(spark: Any, stack: Any, work: Path, log_dir: Path, run_id: str) -> dict[str, Any]:
    """A third stream pair: the example pipeline (enrich -> link topic -> totals) running here,
    snapshotted at a consistent cut by `streamstate_pipeline_snapshot` while a producer
    writes, then restored in place with `streamstate pipeline restore` and run to the end:
    its totals must equal the generator's, no link record lost or counted twice."""
    import threading

    from airflow_provider_streamstate.cli import main as cli
    from airflow_provider_streamstate.engine.state.spark import read_state
    from airflow_provider_streamstate.jobs.example_pipeline import PipelineArgs, start_member
    from airflow_provider_streamstate.jobs.generator import (
        GeneratorSpec,
        ensure_topic,
        expected_aggregates,
        produce,
    )

    bootstrap = stack.kafka_bootstrap
    src, link = f"demo-pipeline-src-{run_id}", f"demo-pipeline-link-{run_id}"
    for topic in (src, link, f"{link}-totals"):
        ensure_topic(bootstrap, topic, partitions=3)
    members = {m: str(work / "pipeline" / m) for m in ("enrich", "totals")}
    store = f"file://{work / 'pipeline-store'}"
    pipeline = {"name": "demo-orders", "members": members,
                "links": [{"upstream": "enrich", "topic": link, "downstream": "totals"}],
                "store": store, "kafka_conn_id": "kafka_demo"}
    rounds = [GeneratorSpec(seed=7, accounts=30, events=400, duplicate_rate=0.05)]
    rounds.append(rounds[0].next_round())
    say(f"\npipeline demo-orders: enrich (dedup) -> {link} -> totals (per account), running here; "
          f"pipeline snapshots to {store}")
    produce(bootstrap, src, rounds[0])

    def args(member: str, trigger: str) -> PipelineArgs:
        return PipelineArgs(bootstrap, members[member], member, source_topic=src, link_topic=link,
                            totals_topic=f"{link}-totals", trigger=trigger, max_offsets_per_trigger=100,
                            query_name=f"demo-{member}-{trigger.split(':')[0]}")

    def totals() -> dict[str, dict[str, int]]:
        return {r.key.account: r.value.asDict() for r in read_state(spark, members["totals"], operatorId=0).collect()}

    queries = [start_member(spark, args(m, "processing:500 milliseconds")) for m in members]
    feeder = threading.Thread(target=produce, args=(bootstrap, src, rounds[1]), kwargs={"rate": 100})
    try:
        while not all(q.lastProgress for q in queries):
            time.sleep(0.5)
        feeder.start()
        cut = run("streamstate_pipeline_snapshot", {"pipelines": [pipeline], "keep_last": 3}, log_dir)
        feeder.join()
        expected = expected_aggregates(rounds)
        deadline = time.monotonic() + 120
        while totals() != expected and time.monotonic() < deadline:
            time.sleep(1)
    finally:
        for q in queries:
            q.stop()
    snap = (cut.tasks.get("pipeline.snapshot[0]") and cut.tasks["pipeline.snapshot[0]"].xcom) or {}
    restored = False
    if snap:
        say(f"  cut {snap['snapshot_id']}: " + ", ".join(f"{m} batch {v['batch_id']}" for m, v in snap["members"].items())
              + f"; {snap['channels'][0]['records']} channel record(s) kept")
        say(f"  $ streamstate pipeline restore {snap['snapshot_id']} --pipeline demo-orders --store {store} ...")
        code = cli(["pipeline", "restore", snap["snapshot_id"], "--pipeline", "demo-orders", "--store", store,
                    "--kafka-bootstrap", bootstrap])
        for m in members:  # run the restored pipeline to the end of the same input
            q = start_member(spark, args(m, "available-now"))
            q.awaitTermination(300)
        restored = code == 0 and totals() == expected
        say(f"  restored at the cut and run to the end: totals {'equal' if restored else 'DIFFER FROM'} "
              "the generator's (no link record lost or counted twice)")
    return {"pipeline_snapshot_dag_succeeded": cut.state == "success", "pipeline_restore_exact": restored}


def _sessions_demo(spark: Any, stack: Any, work: Path, run_id: str) -> dict[str, Any]:
    """The second example stream, written with transformWithStateInPandas (value, list and map
    state, TTL, timers): snapshotted while it runs, its state shown one variable at a time,
    cloned elsewhere and run to the end there: its profiles must equal the generator's."""
    import threading

    from airflow_provider_streamstate.cli import main as cli
    from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
    from airflow_provider_streamstate.engine.state.spark import read_state
    from airflow_provider_streamstate.jobs.example_sessions import SessionArgs, start_query
    from airflow_provider_streamstate.jobs.generator import (
        GeneratorSpec,
        ensure_topic,
        expected_aggregates,
        produce,
    )

    bootstrap = stack.kafka_bootstrap
    src = f"demo-sessions-src-{run_id}"
    for topic in (src, f"{src}-out"):
        ensure_topic(bootstrap, topic, partitions=3)
    checkpoint, clone = work / "sessions" / "ckpt", work / "sessions" / "clone"
    store = f"file://{work / 'sessions-store'}"
    rounds = [GeneratorSpec(seed=11, accounts=20, events=300)]
    rounds.append(rounds[0].next_round())
    say(f"\nstream sessions (transformWithStateInPandas: profile, session, bands, timers), running here; "
          f"snapshots to {store}")
    produce(bootstrap, src, rounds[0])
    args = SessionArgs(bootstrap, str(checkpoint), source_topic=src, sessions_topic=f"{src}-out", gap_ms=60_000,
                       trigger="processing:500 milliseconds", max_offsets_per_trigger=100,
                       query_name="demo-sessions")
    query = start_query(spark, args)
    feeder = threading.Thread(target=produce, args=(bootstrap, src, rounds[1]), kwargs={"rate": 100})
    code = 1
    try:
        while not query.lastProgress:
            time.sleep(0.5)
        feeder.start()
        deadline = time.monotonic() + 60
        while query.lastProgress["batchId"] < 3 and time.monotonic() < deadline:  # mid-run, under input
            time.sleep(0.5)
        say(f"  $ streamstate snapshot create --store {store} --stream sessions --checkpoint {checkpoint}")
        code = cli(["snapshot", "create", "--store", store, "--stream", "sessions", "--checkpoint", str(checkpoint)])
        feeder.join()
    finally:
        query.stop()
    say("  $ streamstate state show --stream sessions latest --state-var profile --limit 3 ...")
    shown = cli(["state", "show", "--store", store, "--stream", "sessions", "latest", "--state-var", "profile",
                 "--limit", "3"])
    say(f"  $ streamstate restore --store {store} --stream sessions latest --target {clone} --new-query-id")
    cloned = cli(["restore", "--store", store, "--stream", "sessions", "latest", "--target", str(clone),
                  "--new-query-id"])
    # Processing-time timers make Spark run a batch at every trigger (an available-now run
    # would never end): run the clone until it has read the whole input, then stop it.
    resumed = start_query(spark, SessionArgs(bootstrap, str(clone), source_topic=src, sessions_topic=f"{src}-out",
                                             gap_ms=60_000, trigger="processing:200 milliseconds",
                                             max_offsets_per_trigger=400, query_name="demo-sessions-clone"))
    expected = expected_aggregates(rounds)
    deadline = time.monotonic() + 180
    try:
        while time.monotonic() < deadline and resumed.exception() is None:
            reader = CheckpointReader(str(clone))
            batches = reader.committed_batches()
            if batches and sum(reader.kafka_offsets(batches[-1]).get(src, {}).values()) == sum(
                    r.events for r in rounds):
                break
            time.sleep(0.5)
    finally:
        resumed.stop()
    profiles = {r.key.account: {"count": r.value.txn_count, "sum": r.value.total_cents, "max": r.value.max_cents}
                for r in read_state(spark, str(clone), stateVarName="profile").collect()}
    exact = code == 0 and shown == 0 and cloned == 0 and profiles == expected
    say(f"  clone run to the end of the input: profiles {'equal' if exact else 'DIFFER FROM'} the generator's")
    return {"sessions_clone_exact": exact}


def _s3_client(stack: Any) -> Any:
    import boto3

    s3 = stack.s3["primary"]
    return boto3.client("s3", endpoint_url=s3["endpoint_url"], region_name=s3["region"],
                        aws_access_key_id=stack_mod.S3_ACCESS_KEY, aws_secret_access_key=stack_mod.S3_SECRET_KEY)


if __name__ == "__main__":
    sys.exit(main())
