"""Rescale benchmark: catching up after a burst of input, with and without rescaling the state.

    .venv/bin/python benchmarks/rescale_bench.py [--keys 1000000] [--rate auto] [--burst-seconds 30] [--quick]

The example stream (deduplication within a 10-minute watermark, then per-account count, sum
and max: RocksDB state with changelog checkpointing) on the Spark 4.3 line's own virtualenv
(dev/spark_versions.py: offline repartition needs Spark >= 4.2), launched by the engine's
launcher with spark-submit on local masters, reading a 6-partition topic of a private local
stack (`.bench/rescale-*`, stopped afterwards):

* **history**: `--keys` transactions, one per account (`acct-<i>`), so the aggregation holds
  exactly `--keys` keys; the stream (4 state partitions, `local[2]`) reads them all; its
  read rate sets the steady rate R (`--rate auto`: a twentieth of it);
* **steady input**: one producer writes generator transactions over the same accounts (the
  state's key count does not change) at R records/s, in event-time order, for the rest of
  the run; "caught up" is the stream's lag (records in the topic minus records its newest
  committed batch has read) back under the threshold seen at steady state (the largest lag
  sampled over `--warmup` seconds, x1.5, at least 2 R);
* a **burst** is 10 R records/s for `--burst-seconds`; each scenario starts at a burst's
  first record (t0) and ends when the stream is caught up:

  (a) the stream left as it is (4 partitions, `local[2]`);
  (b) at t0 the stream is stopped, rescaled in place to 12 partitions (`rescale_spec`: a
      snapshot, its restore to a work copy, Spark's repartition job, the digest check, a
      snapshot of the copy, the swap) and started again on `local[6]`; all of it counts;
  (c) at t0 the stream is stopped and a fresh checkpoint (12 partitions, `local[6]`, its
      own alerts topic) replays the whole topic from the earliest offset: what there is
      without a rescale.

  They run one after the other on the same topic, so (b) starts from the state (a) left and
  (c) replays everything written so far (the record count is printed).
* **rescale cost**: the rescale's own parts, against a plain `restore_snapshot` (fsync, 8
  parallel transfers) of the same source snapshot into a new directory, timed after the
  scenarios with nothing else of this benchmark running.

`--quick`: 20,000 keys, 8 s bursts and warm-up, 5 s between scenarios, 20,000 offsets per
trigger (a smoke run; the figures mean little).

    .venv/bin/python benchmarks/rescale_bench.py --verification [--keys 1000000] [--partitions 4] [--to 12]

**The verification** (`--verification`, no Kafka): a stopped RocksDB stream with `--keys`
accounts, built by a streaming aggregation over `--batches` large batches behind a
deduplication with a 10-minute watermark (tests/apps/keyed_state.py: changelogs over
tables, a second operator; one more batch updates 1% of the accounts), is rescaled from
`--partitions` to `--to` partitions by the repartition job (jobs/rescale_job.py: Spark's
repartition, then the state digests of batches N and N+1 as one Spark task per operator,
store, partition and batch) on a `local-cluster[E,1,2048]` master with E = 1 and 2 executors
of one core, each on a fresh copy; the job's record gives the repartition's seconds and the
digest stage's. The same digests are then computed without Spark on the repartitioned copy,
in one process, with the engine as it was before the digest ran as tasks (`--baseline`, a
commit: its `airflow_provider_streamstate` exported with `git archive`) and as it is, and in
2 worker processes. Each local digest runs in a fresh Python process; entries/s counts the
entries of the batch digested. CPU seconds (a local digest's process and its workers; the
job's tasks, as they measured them) stand beside wall seconds: on a shared machine they say
what the code costs, wall seconds what the run got.
Prints Markdown tables; `--cost` and `--verification` also write their figures as JSON
(`--results`, default `.bench/rescale_cost_results.json` or `.bench/rescale_verification_results.json`);
nothing else outside the work directory, which they remove.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench_common import REPO, WORK, MiB  # this folder is on sys.path; it puts the repo there too

from dev import spark_versions
from dev import stack as stack_mod

STEP_MS = 10  # event time per transaction: the 10-minute watermark spans 60,000 records
TOPIC_PARTITIONS = 6
SEED = 23
BURST = 10  # the burst's rate, in steady rates


class _Log:
    def info(self, *a: object) -> None: ...

    warning = info


class Producer(threading.Thread):
    """One producer, in event-time order, at R records/s, or BURST x R while a burst lasts.
    `written`: the records in the topic (history included), counted on delivery."""

    def __init__(self, bootstrap: str, topic: str, keys: int, rate: float, written: int) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Producer as KafkaProducer

        self.producer = KafkaProducer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                       "linger.ms": 5})
        self.topic, self.keys, self.rate = topic, keys, rate
        self.written = written
        self.index = keys  # generator indices after the history's: event time continues
        self.burst_until = 0.0
        self.burst_sent = 0
        self.stopping = threading.Event()
        self.errors: list[str] = []

    def _delivered(self, err: object, _msg: object) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.written += 1

    def burst(self, seconds: float) -> float:
        """Start a burst now; returns its t0."""
        t0 = time.monotonic()
        self.burst_sent = 0
        self.burst_until = t0 + seconds
        return t0

    def run(self) -> None:
        from airflow_provider_streamstate.jobs.generator import transaction

        budget, last, in_burst = 0.0, time.monotonic(), False
        while not self.stopping.is_set():
            now = time.monotonic()
            bursting = now < self.burst_until
            if in_burst and not bursting:
                budget = min(budget, 0.0)  # what the burst could not write is dropped, not written late
            in_burst = bursting
            budget += (self.rate * BURST if bursting else self.rate) * (now - last)
            last = now
            n = min(int(budget), 2000)
            if n <= 0:
                self.producer.poll(0.005)
                continue
            for _ in range(n):
                txn = transaction(SEED, self.index, self.keys, STEP_MS)
                while True:
                    try:
                        self.producer.produce(self.topic, key=txn.account.encode(), value=txn.to_json(),
                                              on_delivery=self._delivered)
                        break
                    except BufferError:
                        self.producer.poll(0.05)
                self.index += 1
            budget -= n
            if bursting:
                self.burst_sent += n
            self.producer.poll(0)
        self.producer.flush(60)


def produce_history(bootstrap: str, topic: str, keys: int) -> int:
    """One transaction per account `acct-<i>` (the generator's naming), as fast as one
    producer goes, in event-time order."""
    from confluent_kafka import Producer as KafkaProducer

    from airflow_provider_streamstate.jobs.generator import START_MS

    producer = KafkaProducer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                              "linger.ms": 20, "batch.size": 1 << 20})
    for i in range(keys):
        account = f"acct-{i:05d}"
        value = json.dumps({"txn_id": f"h-{i:09d}", "account": account, "amount_cents": 1 + (i * 7919) % 100_000,
                            "ts_ms": START_MS + i * STEP_MS}, separators=(",", ":")).encode()
        while True:
            try:
                producer.produce(topic, key=account.encode(), value=value)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise SystemExit("the history was not delivered")
    return keys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--keys", type=int, default=1_000_000, help="accounts in the state (one history record each)")
    p.add_argument("--rate", default="auto", help="steady rate R, records/s ('auto': the build's read rate / 20)")
    p.add_argument("--burst-seconds", type=float, default=30.0)
    p.add_argument("--warmup", type=float, default=30.0, help="seconds of steady input before the first burst")
    p.add_argument("--settle", type=float, default=15.0, help="seconds of steady input between scenarios")
    p.add_argument("--max-offsets", type=int, default=100_000, help="maxOffsetsPerTrigger of every run")
    p.add_argument("--partitions", type=int, default=4, help="state partitions of the stream; (b), (c): 3x")
    p.add_argument("--timeout", type=float, default=1800.0, help="give up on a scenario after this many seconds")
    p.add_argument("--quick", action="store_true", help="20,000 keys, 8 s bursts and warm-up")
    p.add_argument("--verification", action="store_true", help="measure the rescale's verification instead")
    p.add_argument("--cost", action="store_true", help="measure an in-place rescale's parts and bytes instead")
    p.add_argument("--to", type=int, default=0, help="--verification: partitions after the rescale (default 3x)")
    p.add_argument("--batches", type=int, default=4, help="--verification: batches that build the state")
    p.add_argument("--baseline", default="fc891b1", help="--verification: the commit of the digest before")
    p.add_argument("--wait-load", type=float, default=0.0,
                   help="--verification: before each job, wait (up to an hour) for the 1-minute load average to "
                        "fall under this (a shared machine)")
    p.add_argument("--jobs-only", action="store_true", help="--verification: the jobs, not the local digests")
    p.add_argument("--state", help="--verification, --cost: a checkpoint built by tests/apps/keyed_state.py to use "
                                   "(copied, left as it is) instead of building one")
    p.add_argument("--results", help="--verification, --cost: the JSON file of the figures "
                                     "(default .bench/rescale_<cost|verification>_results.json)")
    args = p.parse_args(argv)
    if args.verification:
        return verification_bench(args)
    if args.cost:
        return cost_bench(args)
    if args.quick:
        args.keys, args.burst_seconds, args.warmup, args.settle = 20_000, 8.0, 8.0, 5.0
        args.max_offsets = min(args.max_offsets, 20_000)

    line = spark_versions.get("4.3").require()
    WORK.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="rescale-", dir=WORK))
    os.environ["STREAMSTATE_HOME"] = str(work / "home")  # the repartition job's logs
    stack = stack_mod.up(work / "stack")  # a private stack: others' stacks are left alone
    try:
        return _run(args, line, stack, work)
    finally:
        stack_mod.down(work / "stack")
        shutil.rmtree(work, ignore_errors=True)


def _run(args: argparse.Namespace, line: Any, stack: Any, work: Path) -> int:
    import airflow_provider_streamstate.jobs.example_stream as job
    from airflow_provider_streamstate.engine.streams import launcher
    from airflow_provider_streamstate.jobs.generator import ensure_topic
    from airflow_provider_streamstate.spec import StreamSpec

    os.environ["AIRFLOW_CONN_SPARK_BENCH"] = json.dumps({"conn_type": "spark", "host": "local[2]"})
    os.environ["AIRFLOW_CONN_KAFKA_BENCH"] = json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": stack.kafka_bootstrap}})
    topic = f"bench-rescale-{int(time.time())}"
    ensure_topic(stack.kafka_bootstrap, topic, partitions=TOPIC_PARTITIONS)
    wide = args.partitions * 3

    def spec_for(name: str, partitions: int, master: str) -> Any:
        return StreamSpec(
            name=name, application=job.__file__,
            application_args=["--bootstrap-servers", stack.kafka_bootstrap, "--checkpoint", "{checkpoint}",
                              "--source-topic", topic, "--alerts-topic", "{sinks[alerts]}",
                              "--trigger", "processing:1 second", "--max-offsets-per-trigger", str(args.max_offsets),
                              "--state-store", "rocksdb-changelog", "--shuffle-partitions", str(partitions),
                              "--partitions", str(TOPIC_PARTITIONS)],
            checkpoint=str(work / name), store=f"file://{work / 'store'}", spark_conn_id="spark_bench",
            kafka_conn_id="kafka_bench", master=master, jars=line.kafka_jars(),
            env=line.env({"PATH": os.environ["PATH"]}), sinks={"alerts": f"{topic}-{name}-alerts"},
            heartbeat_interval_s=1.0,
            conf={"spark.ui.enabled": "false", "spark.driver.host": "127.0.0.1",
                  "spark.driver.bindAddress": "127.0.0.1", "spark.driver.memory": "2g"},
        )

    base = spec_for("orders", args.partitions, "local[2]")
    wide_spec = base.derive(master="local[6]")  # after the rescale: same checkpoint, 3x the cores
    replay = spec_for("orders-replay", wide, "local[6]")
    try:
        return _scenarios(args, work, topic, base, wide_spec, replay, wide)
    finally:
        for checkpoint in (base.checkpoint, replay.checkpoint):  # whatever ended the run
            if Path(checkpoint).exists():
                try:
                    launcher.stop(checkpoint, timeout_s=60)
                except Exception as exc:  # noqa: BLE001 - cleaning up; the run's own error matters
                    print(f"could not stop the stream on {checkpoint}: {exc}", file=sys.stderr)


def _scenarios(args: argparse.Namespace, work: Path, topic: str, base: Any, wide_spec: Any, replay: Any,
               wide: int) -> int:
    from airflow_provider_streamstate.engine.catalog.snapshots import get_snapshot
    from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
    from airflow_provider_streamstate.engine.stores import open_store
    from airflow_provider_streamstate.engine.streams import launcher
    from airflow_provider_streamstate.streams.rescale import rescale_spec
    from airflow_provider_streamstate.streams.start import start_stream
    from tests.streams import consumed_records

    bootstrap = base.application_args[1]
    results: dict[str, Any] = {"keys": args.keys}

    t = time.monotonic()
    written = produce_history(bootstrap, topic, args.keys)
    results["history produced s"] = time.monotonic() - t
    print(f"history: {written:,} records in {results['history produced s']:.1f} s", flush=True)

    def wait_consumed(checkpoint: str, n: int, timeout: float) -> float:
        t = time.monotonic()
        while consumed_records(checkpoint) < n:
            if time.monotonic() - t > timeout:
                raise SystemExit(f"timed out waiting for {checkpoint} to read {n} records")
            time.sleep(0.25)
        return time.monotonic()

    t = time.monotonic()
    start_stream(base, startup_timeout_s=900, log=_Log())
    running = time.monotonic()
    done = wait_consumed(base.checkpoint, written, args.timeout)
    results["build: start s"] = running - t
    results["build: read s"] = done - running
    build_rate = written / (done - running)
    rate = build_rate / 20 if args.rate == "auto" else float(args.rate)
    rate = max(10.0, round(rate, -1) if rate >= 100 else round(rate))
    results["build read rate (records/s)"] = round(build_rate)
    results["steady rate R (records/s)"] = rate
    print(f"built: {written:,} keys read in {done - running:.1f} s ({build_rate:,.0f}/s); R = {rate:,.0f}/s",
          flush=True)

    producer = Producer(bootstrap, topic, args.keys, rate, written)
    producer.start()

    def lag(checkpoint: str) -> int:
        return producer.written - consumed_records(checkpoint)

    samples = []
    t = time.monotonic()
    while time.monotonic() - t < args.warmup:
        samples.append(lag(base.checkpoint))
        time.sleep(0.25)
    threshold = max(int(max(samples) * 1.5), int(2 * rate))
    results["steady lag: max sampled"] = max(samples)
    results["caught-up threshold (records)"] = threshold
    print(f"steady: lag max {max(samples)}, threshold {threshold}", flush=True)

    def caught_up(checkpoint: str, t0: float, label: str) -> dict[str, Any]:
        end = t0 + args.burst_seconds
        peak = 0
        while True:
            now = time.monotonic()
            if now - t0 > args.timeout:
                return {"s": None, "peak lag": peak}
            try:
                behind = lag(checkpoint)
            except Exception:  # noqa: BLE001 - a fresh checkpoint before its first batch
                behind = producer.written
            peak = max(peak, behind)
            if now >= end and behind <= threshold:
                out = {"s": now - t0, "peak lag": peak, "burst records": producer.burst_sent,
                       "burst rate": producer.burst_sent / args.burst_seconds}
                print(f"{label}: caught up after {out['s']:.1f} s (peak lag {peak:,}, burst {producer.burst_sent:,} "
                      f"records = {out['burst rate']:,.0f}/s)", flush=True)
                return out
            time.sleep(0.25)

    # (a) left as it is
    a = caught_up(base.checkpoint, producer.burst(args.burst_seconds), "(a) as it is")
    time.sleep(args.settle)

    # (b) stop, rescale in place to 3x the partitions, start on 3x the cores
    t0 = producer.burst(args.burst_seconds)
    launcher.stop(base.checkpoint, timeout_s=300)
    stopped = time.monotonic()
    rescaled = rescale_spec(wide_spec, wide, timeout_s=args.timeout)
    done_rescale = time.monotonic()
    start_stream(wide_spec, startup_timeout_s=900, log=_Log())
    started = time.monotonic()
    b = caught_up(wide_spec.checkpoint, t0, f"(b) rescaled {args.partitions} -> {wide}")
    b.update({"stop s": stopped - t0, "rescale s": done_rescale - stopped, "start s": started - done_rescale})
    time.sleep(args.settle)

    # (c) stop, replay everything into a fresh checkpoint with 3x the partitions and cores
    t0 = producer.burst(args.burst_seconds)
    launcher.stop(wide_spec.checkpoint, timeout_s=300)
    in_topic = producer.written
    start_stream(replay, startup_timeout_s=900, log=_Log())
    c = caught_up(replay.checkpoint, t0, "(c) fresh checkpoint replaying")
    c["replayed records (at t0)"] = in_topic
    producer.stopping.set()
    producer.join(120)
    launcher.stop(replay.checkpoint, timeout_s=300)
    if producer.errors:
        print(f"producer errors: {producer.errors[:3]}", file=sys.stderr)

    # The rescale's own cost against a plain restore of the same snapshot.
    store = open_store(base.store)
    source = get_snapshot(store, base.name, rescaled.source_snapshot)
    size = sum(f.size for f in source.files)
    t = time.monotonic()
    restore_snapshot(store, base.name, rescaled.source_snapshot, str(work / "plain-restore"))
    plain = time.monotonic() - t

    def s(x: float | None) -> str:
        return f"> {args.timeout:.0f}" if x is None else f"{x:.1f}"

    def ratio(x: float | None, y: float | None) -> str:
        return "-" if x is None or y is None else f"{x / y:.2f}x"

    stores = ", ".join(f"op {st['operator_id']} {st['store']}: {st['entries']:,} entries" for st in rescaled.stores)
    print(f"\nstate: {stores}; source snapshot {size / MiB:.0f} MiB in {len(source.files)} files")
    print("\n| measure | value |\n|---|---|")
    for k, v in results.items():
        print(f"| {k} | {v:.1f} |" if isinstance(v, float) else f"| {k} | {v:,} |")

    print(f"\n| scenario (burst: {BURST} R = {BURST * rate:,.0f}/s for {args.burst_seconds:.0f} s) | caught up (s) "
          "| / (a) | peak lag | burst achieved (records/s) | parts (s) |")
    print("|---|---:|---:|---:|---:|---|")
    print(f"| (a) as it is: {args.partitions} partitions, local[2] | {s(a['s'])} | 1.00x | {a['peak lag']:,} "
          f"| {a.get('burst rate', 0):,.0f} | - |")
    print(f"| (b) rescaled to {wide} partitions, local[6] | {s(b['s'])} | {ratio(b['s'], a['s'])} | {b['peak lag']:,} "
          f"| {b.get('burst rate', 0):,.0f} | stop {b['stop s']:.1f}, rescale {b['rescale s']:.1f}, start "
          f"{b['start s']:.1f}, catch-up {s(b['s'] and b['s'] - b['stop s'] - b['rescale s'] - b['start s'])} |")
    print(f"| (c) fresh checkpoint, {wide} partitions, local[6], replaying {c['replayed records (at t0)']:,} records "
          f"| {s(c['s'])} | {ratio(c['s'], a['s'])} | {c['peak lag']:,} | {c.get('burst rate', 0):,.0f} | - |")
    print(f"\n(c) / (b): {ratio(c['s'], b['s'])}")

    sec = rescaled.seconds
    print(f"\n| rescale {args.partitions} -> {wide} part | s | / plain restore |\n|---|---:|---:|")
    for k in ("snapshot", "restore", "repartition", "verify", "snapshot_rescaled", "swap", "total"):
        if k in sec:
            print(f"| {k} | {sec[k]:.2f} | {ratio(sec[k], plain)} |")
    print(f"| plain `restore_snapshot` of the same snapshot ({size / MiB:.0f} MiB) | {plain:.2f} | 1.00x |")
    return 0


def _local_digest(python: str, pythonpath: str, checkpoint: str, batch: int, **kwargs: Any) -> dict[str, Any]:
    """`state_digest` in a fresh Python process (the engine found on `pythonpath`): its
    seconds, CPU seconds, entries and stores."""
    code = ("import json, resource, sys, time\n"
            "from airflow_provider_streamstate.engine.lookup.digest import state_digest\n"
            "def cpu():\n"
            "    r = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]\n"
            "    return sum(x.ru_utime + x.ru_stime for x in r)\n"
            "t, c = time.perf_counter(), cpu()\n"
            f"d = state_digest({checkpoint!r}, {batch}, **{kwargs!r})\n"
            "s, c = time.perf_counter() - t, cpu() - c\n"
            "print(json.dumps({'s': s, 'cpu': c, 'entries': sum(x.entries for x in d.stores),"
            " 'stores': [[x.operator_id, x.store, x.entries, x.fingerprint] for x in d.stores]}))")
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": pythonpath},
                         cwd=pythonpath, timeout=7200)  # `-c` puts the working directory first on sys.path
    if out.returncode:
        raise SystemExit(f"the local digest failed: {out.stderr[-2000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def _built_state(args: argparse.Namespace, line: Any, work: Path) -> tuple[Path, int, int]:
    """The stopped RocksDB checkpoint a run rescales (built by tests/apps/keyed_state.py, or
    `--state`), its newest batch and the partitions to rescale it to; `args.partitions` is
    set to the checkpoint's own."""
    from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader, state_partitions

    built = Path(args.state) if args.state else work / "ckpt"
    t = time.monotonic()
    if not args.state:
        out = subprocess.run([str(line.python), str(REPO / "tests/apps/keyed_state.py"), str(built), str(work),
                              str(args.keys), str(args.partitions), str(args.batches), "--dedup", "--touch",
                              str(max(1, args.keys // 100))], capture_output=True, text=True, env=line.env())
        if out.returncode:
            raise SystemExit(f"building the state failed: {out.stderr[-3000:]}")
        shutil.rmtree(work / "in")
    reader = CheckpointReader(str(built))
    batch = reader.resolve_batch(None)
    pinned = state_partitions({str(k): str(v) for k, v in (reader.offsets(batch)[0].get("conf") or {}).items()})
    args.partitions = pinned or args.partitions
    size = _tree_bytes(built / "state")
    print(f"{'given' if args.state else 'built'}: batch {batch}, {size / MiB:.1f} MiB of state"
          + ("" if args.state else f" ({args.keys:,} keys, {args.partitions} partitions) in "
             f"{time.monotonic() - t:.0f} s"), flush=True)
    return built, batch, args.to or args.partitions * 3


def _tree_bytes(root: Path) -> int:
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) if root.exists() else 0


def cost_bench(args: argparse.Namespace) -> int:
    """An in-place rescale (`rescale_stream`, the path the CLI and the DAG take) of a stopped
    checkpoint into a local store, its repartition job on `local-cluster[2,1,2048]`: each
    part's seconds and the bytes each part wrote, against the state's size, Spark's
    repartition job alone and a plain restore of the same snapshot."""
    from airflow_provider_streamstate.backends.local.store import LocalStore
    from airflow_provider_streamstate.engine.catalog.snapshots import resolve_snapshot
    from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
    from airflow_provider_streamstate.engine.state.rescale import rescale_job_application, rescale_stream

    line = spark_versions.get("4.3").require()
    WORK.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="rescale-cost-", dir=WORK))
    os.environ["STREAMSTATE_HOME"] = str(work / "home")
    started, load = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), os.getloadavg()
    # The state was written a moment ago by the build, whose query has stopped: not a query running on it.
    os.environ["STREAMSTATE_UNMANAGED_WINDOW_S"] = "0"
    try:
        built, batch, to = _built_state(args, line, work)
        checkpoint = work / "orders"
        shutil.copytree(built, checkpoint)
        on_disk = _tree_bytes(checkpoint / "state")  # every version the checkpoint keeps
        store = LocalStore(work / "store")
        written: dict[str, int] = {}

        def command(job_args: Any) -> tuple[list[str], dict[str, str]]:
            return (line.submit_command(rescale_job_application(), list(job_args), master="local-cluster[2,1,2048]",
                                        conf={"spark.executor.memory": "1g"}), line.env())

        result = rescale_stream(store, "orders", str(checkpoint), partitions=to, command=command)
        sec = result.seconds
        after = _tree_bytes(checkpoint / "state")
        blobs = _tree_bytes(work / "store")
        source = resolve_snapshot(store, "orders", result.source_snapshot)
        rescaled = resolve_snapshot(store, "orders", result.rescaled_snapshot) if result.rescaled_snapshot else None
        source_bytes = sum(f.size for f in source.files)
        state = sum(f.size for f in source.files if f.path.startswith("state/"))  # the state at batch N
        shared = {f.sha256 for f in source.files}
        written["snapshot of the stopped stream (blobs written to the store)"] = source_bytes
        written["restore of it to the work copy"] = source_bytes
        written["Spark's repartition (the new state, written once by Spark)"] = after - on_disk  # old files stay
        written["swap (local: renames, no bytes copied)"] = 0
        written["snapshot of the rescaled checkpoint (new blobs)"] = sum(
            f.size for f in (rescaled.files if rescaled else []) if f.sha256 not in shared)

        # Baselines on the same machine in the same run: a plain restore, the repartition job alone.
        t = time.monotonic()
        restore_snapshot(store, "orders", result.source_snapshot, str(work / "plain-restore"))
        plain = time.monotonic() - t
        alone = work / "alone"
        shutil.copytree(built, alone)
        t = time.monotonic()
        out = subprocess.run(command([str(alone), str(to)])[0], capture_output=True, text=True, env=line.env())
        job = time.monotonic() - t
        if out.returncode:
            raise SystemExit(f"the repartition job alone failed: {out.stderr[-3000:]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)

    copied = sum(b for k, b in written.items() if not k.startswith("Spark"))
    given = copied - written["snapshot of the stopped stream (blobs written to the store)"]
    _write_results(args, "cost", {
        "date": started, "keys (--keys)": args.keys, "state (--state)": args.state, "batch": batch,
        "partitions": {"from": args.partitions, "to": to}, "load average": {"start": load, "end": os.getloadavg()},
        "state bytes (the source snapshot's state files)": state, "state/ bytes before (every version)": on_disk,
        "state/ bytes after": after, "store bytes": blobs, "rescale": result.to_json(), "bytes written": written,
        "bytes copied by the rescale": copied, "bytes copied from an existing snapshot": given,
        "plain restore s": plain, "repartition job alone s": job})
    print(f"\nstate: {state / MiB:.1f} MiB at batch {batch} (the snapshot's state files; {on_disk / MiB:.1f} MiB in "
          f"the checkpoint's state/ with older versions), {args.partitions} -> {to} partitions; after the rescale "
          f"{after / MiB:.1f} MiB in the checkpoint's state/, {blobs / MiB:.1f} MiB in the store")
    print("\n| part | s | bytes written (MiB) | / state |\n|---|---:|---:|---:|")
    for k in ("snapshot", "restore", "repartition", "verify", "swap", "snapshot_rescaled", "total"):
        if k in sec:
            print(f"| {k} | {sec[k]:.2f} | | |")
    for k, b in written.items():
        print(f"| {k} | | {b / MiB:.1f} | {b / state:.2f}x |")
    print(f"| **copied by the rescale (all but Spark's write)** | | {copied / MiB:.1f} | {copied / state:.2f}x |")
    print(f"| **the same from an existing snapshot (`--snapshot latest`)** | | {given / MiB:.1f} | {given / state:.2f}x |")
    print(f"\n| baseline | s |\n|---|---:|\n| plain restore of the source snapshot | {plain:.2f} |"
          f"\n| the repartition job alone (spark-submit, repartition and verification) | {job:.2f} |")
    print(f"\nrescale total / (repartition job alone + one plain restore): {sec['total'] / (job + plain):.2f}x; "
          f"verification on the executors {sec.get('verify_digests', 0):.1f} s of the job's repartition "
          f"{sec.get('repartition', 0):.1f} s (spark-submit included)")
    return 0


def verification_bench(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.checkpoint.filesystems import open_checkpoint_fs
    from airflow_provider_streamstate.engine.checkpoint.repartition import read_repartition_record
    from airflow_provider_streamstate.engine.state.rescale import rescale_job_application

    line = spark_versions.get("4.3").require()
    WORK.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="rescale-verify-", dir=WORK))
    args.started, args.load = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), os.getloadavg()
    try:
        built, batch, to = _built_state(args, line, work)

        runs: dict[int, dict[str, Any]] = {}
        for executors in (1, 2):
            copy = work / f"x{executors}"
            shutil.copytree(built, copy)
            command = line.submit_command(rescale_job_application(), [str(copy), str(to)],
                                          master=f"local-cluster[{executors},1,2048]",
                                          conf={"spark.executor.memory": "1g"})
            quiet_until = time.monotonic() + 3600
            while args.wait_load and os.getloadavg()[0] >= args.wait_load and time.monotonic() < quiet_until:
                time.sleep(10)
            t, load = time.monotonic(), os.getloadavg()[0]
            out = subprocess.run(command, capture_output=True, text=True, env=line.env())
            wall = time.monotonic() - t
            record = read_repartition_record(open_checkpoint_fs(str(copy)))
            v = record.verification if record is not None else None
            if out.returncode or record is None or v is None or not v.ok:
                raise SystemExit(f"the job with {executors} executor(s) failed ({out.returncode}): "
                                 f"{v.problems if v else out.stderr[-3000:]}")
            entries = {k: sum(s["entries"] for s in (getattr(v, k) or {})["stores"]) for k in ("before", "after")}
            runs[executors] = {"wall": wall, "repartition": record.seconds or 0.0, "v": v, "entries": entries,
                               "load average": {"before": load, "after": os.getloadavg()[0]}}
            print(f"{executors} executor(s): job {wall:.0f} s, repartition {record.seconds:.1f} s, digests "
                  f"{v.seconds['digests']:.1f} s ({v.tasks} tasks on {v.executors} executors); load average "
                  f"{load:.1f} before, {os.getloadavg()[0]:.1f} after", flush=True)
        ref = runs[1]["v"]
        if ref.before["stores"] != runs[2]["v"].before["stores"] or ref.after["stores"] != runs[2]["v"].after["stores"]:
            raise SystemExit("1 and 2 executors gave different digests")

        local: dict[tuple[str, str, str], dict[str, Any]] = {}
        if args.jobs_only:
            return _finish_verification(args, to, runs, local)
        # Without Spark, on the repartitioned copy: the digest before, as it is, in 2 processes.
        baseline = work / "baseline"
        baseline.mkdir()
        archive = subprocess.run(["git", "-C", str(REPO), "archive", args.baseline, "airflow_provider_streamstate"],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(baseline)], input=archive, check=True)
        py, now, then, rescaled = sys.executable, str(REPO), str(baseline), str(work / "x1")
        local = {
            ("N", "before", "placement"): _local_digest(py, then, rescaled, batch),
            ("N", "now", "placement"): _local_digest(py, now, rescaled, batch, workers=1),
            ("N", "now", "none"): _local_digest(py, now, rescaled, batch, workers=1, placement=False),
            ("N+1", "before", "placement"): _local_digest(py, then, rescaled, batch + 1),
            ("N+1", "now", "placement"): _local_digest(py, now, rescaled, batch + 1, workers=1),
            ("N+1", "now, 2 processes", "placement"): _local_digest(py, now, rescaled, batch + 1, workers=2),
        }
        for (b, _, _), r in local.items():
            want = ref.before if b == "N" else ref.after
            if r["stores"] != [[s["operator_id"], s["store"], s["entries"], s["fingerprint"]] for s in want["stores"]]:
                raise SystemExit(f"a local digest of batch {b} differs from the job's")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return _finish_verification(args, to, runs, local)


def _finish_verification(args: argparse.Namespace, to: int, runs: dict[int, dict[str, Any]],
                         local: dict[tuple[str, str, str], dict[str, Any]]) -> int:
    _write_results(args, "verification", {
        "date": args.started, "keys (--keys)": args.keys, "state (--state)": args.state,
        "partitions": {"from": args.partitions, "to": to}, "load average": {"start": args.load, "end": os.getloadavg()},
        "jobs": {f"{e} executor(s)": {**{k: v for k, v in r.items() if k != "v"}, "verification": r["v"].to_json()}
                 for e, r in runs.items()},
        "local digests": {"/".join(k): {n: x for n, x in r.items() if n != "stores"} for k, r in local.items()}})
    return _print_verification(args, to, runs, local)


def _write_results(args: argparse.Namespace, kind: str, results: dict[str, Any]) -> None:
    out = Path(args.results) if args.results else WORK / f"rescale_{kind}_results.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1, default=str) + "\n")
    print(f"results: {out}", flush=True)


def _print_verification(args: argparse.Namespace, to: int, runs: dict[int, dict[str, Any]],
                        local: dict[tuple[str, str, str], dict[str, Any]]) -> int:
    total = runs[1]["entries"]["before"] + runs[1]["entries"]["after"]
    print(f"\nstate: {runs[1]['entries']['before']:,} entries at batch N (2 operators), rescaled "
          f"{args.partitions} -> {to} partitions; the digests read {total:,} entries")
    print("\n| local-cluster | repartition (s) | verification: digest stage (s) | verification / repartition "
          "| entries/s | / 1 executor | tasks' wall s | tasks' CPU s | entries per task CPU s | tasks |\n"
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for e, r in runs.items():
        v = r["v"]
        rate = total / v.seconds["digests"]
        base = total / runs[1]["v"].seconds["digests"]
        print(f"| {e} executor{'s' if e > 1 else ''} x 1 core | {r['repartition']:.1f} | {v.seconds['digests']:.1f} "
              f"| {v.seconds['digests'] / r['repartition']:.2f} | {rate:,.0f} | {rate / base:.2f}x "
              f"| {v.seconds['task_total']:.1f} | {v.seconds['task_cpu']:.1f} | {total / v.seconds['task_cpu']:,.0f} "
              f"| {v.tasks} |")
    if not local:
        return 0
    print("\n| local digest, no Spark | batch | placement checked | s | CPU s | entries per CPU s | / before (CPU) |\n"
          "|---|---|---|---:|---:|---:|---:|")
    for (b, how, placement), r in local.items():
        base = local[(b, "before", "placement")]
        print(f"| {how} | {b} | {'yes' if placement == 'placement' else 'no'} | {r['s']:.1f} | {r['cpu']:.1f} "
              f"| {r['entries'] / r['cpu']:,.0f} | {base['cpu'] / r['cpu']:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
