"""Every Spark line a platform runs, against the engine: 3.5, 4.0, 4.1 (the main venv) and 4.3.

Per line (dev/spark_versions.py: its own virtualenv, spark-submit and Kafka connector), one
driver runs everything Spark does, started by the engine's launcher under jobs/supervised.py
with that line's Python (tests/compat/apps/compat_driver.py): the example stream's
`accounts` query (deduplication, then per-account count/sum/max) once with HDFS-backed state
and once with RocksDB state (changelog checkpointing), on one Kafka topic of the stack. The
engine, in the main venv (it only reads and writes files), snapshots both checkpoints under
load, restores the earliest snapshot elsewhere and fails the newest over to another topic
(offset translation, `engine/dr/failover.py`); the same driver then reads the snapshots'
state through Spark's state data source and the engine's StateReader, and continues both
copies. "Exact" is checked against the generator: the stream writes each updated account's
whole state (alerts with threshold 0), so the last alert per account is its state, and
Spark's state reader gives the rest where the line has one.

What each line's checkpoint looks like (offset and commit logs, `metadata`, checksum files,
operator metadata, state files) is collected per line; `STREAMSTATE_COMPAT_REPORT=<file>`
writes it there as JSON.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.core.errors import StreamstateError
from airflow_provider_streamstate.engine.core.manifest import Manifest
from airflow_provider_streamstate.engine.dr.failover import FailoverResult, TopicMap, failover
from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.streams.launcher import (
    launch,
    read_driver,
    status,
    stop,
    supervised_application,
    wait_until_running,
)
from airflow_provider_streamstate.jobs.generator import (
    GeneratorSpec,
    ensure_topic,
    expected_aggregates,
    produce,
)
from dev import spark_versions
from tests.integration.test_failover_translation import mirror
from tests.streams import consumed_records, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.spark_lines, pytest.mark.usefixtures("spark_as_shipped")]

DRIVER = Path(__file__).resolve().parent / "apps" / "compat_driver.py"
STORES = ("hdfs", "rocksdb-changelog")
NO_STATE_SOURCE = "Spark 3.5 has no state data source: format('statestore') and 'state-metadata' came in Spark 4.0"
OFFSET_LOG_V2 = (4, 3)  # spark.sql.streaming.offsetLog.formatVersion=2 (SPARK-54583), opt-in


def _id(version: spark_versions.SparkVersion) -> str:
    return f"spark-{version.line}"


@dataclass
class LineRun:
    """Everything one Spark line's run produced, for the checks below."""

    version: spark_versions.SparkVersion
    root: Path
    topic: str
    dr_topic: str
    specs: list[GeneratorSpec]  # produced on the primary topic, in order
    dr_spec: GeneratorSpec  # produced on the DR topic only, after its mirrored history
    info: dict[str, Any] = field(default_factory=dict)
    snapshots: dict[str, list[Manifest]] = field(default_factory=dict)
    failovers: dict[str, FailoverResult] = field(default_factory=dict)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # phase -> what went wrong
    layout: dict[str, dict[str, Any]] = field(default_factory=dict)
    driver_exit: int | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    bootstrap: str = ""
    # Set once its snapshots are taken (or it failed): the main line's driver reads them.
    ready: threading.Event = field(default_factory=threading.Event)
    _topics: dict[str, list[tuple[int, int, dict[str, Any]]]] = field(default_factory=dict)

    def records(self, topic: str) -> list[tuple[int, int, dict[str, Any]]]:
        """`topic` read once (the checks run after every write): (partition, offset, value)."""
        if topic not in self._topics:
            self._topics[topic] = read_topic(self.bootstrap, topic)
        return self._topics[topic]

    def last_alert_per_account(self, topic: str) -> dict[str, dict[str, int]]:
        """Each account's last alert (its whole state: the threshold is 0) in an alerts topic."""
        return {a["account"]: {"count": a["txn_count"], "sum": a["total_cents"], "max": a["max_cents"]}
                for _, _, a in self.records(topic)}

    def accounts_from(self, topic: str, offsets: dict[str, int]) -> set[str]:
        """Accounts of the records of `topic` from `offsets` (partition -> offset) on."""
        return {t["account"] for p, o, t in self.records(topic) if o >= offsets.get(str(p), 0)}

    def oracle_state(self, offsets: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
        """Per-account state after consuming exactly up to `offsets` (tests/streams.py's oracle)."""
        seen: set[str] = set()
        out: dict[str, dict[str, int]] = {}
        for topic, ends in offsets.items():
            for p, o, t in self.records(topic):
                if o >= ends.get(str(p), 0) or t["txn_id"] in seen:
                    continue
                seen.add(t["txn_id"])
                agg = out.setdefault(t["account"], {"count": 0, "sum": 0, "max": 0})
                agg["count"] += 1
                agg["sum"] += t["amount_cents"]
                agg["max"] = max(agg["max"], t["amount_cents"])
        return out

    def checkpoint(self, kind: str) -> Path:
        return self.root / f"ckpt-{kind}"

    def result(self, name: str) -> Any:
        out = self.results.get(name)
        assert out is not None, f"no result for {name}; errors: {self.errors}"
        assert "error" not in out, f"{name}: {out['error']}\n{out.get('trace', '')}"
        return out["value"]


def read_topic(bootstrap: str, topic: str) -> list[tuple[int, int, dict[str, Any]]]:
    """Every record of `topic` as (partition, offset, JSON value), each partition asked for by
    its exact count (a consumer waits out its timeout for a batch it cannot fill)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"compat-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "log_level": 0})
    out: list[tuple[int, int, dict[str, Any]]] = []
    try:
        for p in sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high <= low:
                continue
            consumer.assign([TopicPartition(topic, p, low)])
            offset = low
            while offset < high:
                msgs = consumer.consume(min(1000, high - offset), timeout=10)
                assert msgs, f"could not read {topic}[{p}] from {offset} up to {high}"
                for m in msgs:
                    assert m.error() is None, m.error()
                    out.append((p, m.offset(), json.loads(m.value())))
                    offset = m.offset() + 1
    finally:
        consumer.close()
    return out


_STATE_FILE = re.compile(r"^(\d+)(_[0-9a-f-]+)?\.(delta|snapshot|zip|changelog)$")


def describe_checkpoint(root: Path) -> dict[str, Any]:
    """The parts of a checkpoint where Spark lines differ: log headers and fields, the
    `metadata` file, checksum files, operator metadata and state file kinds."""
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()
                   and "_streamstate" not in p.parts)
    out: dict[str, Any] = {}
    lines = (root / "offsets" / "0").read_text().split("\n")
    meta = json.loads(lines[1])
    out["offsets"] = {"header": lines[0], "fields": sorted(meta), "conf": sorted(meta.get("conf", {})),
                      "source_lines": lines[2:]}
    commit = (root / "commits" / "0").read_text().split("\n")
    out["commits"] = {"header": commit[0], "fields": sorted(json.loads(commit[1]))}
    out["metadata"] = sorted(json.loads((root / "metadata").read_text())) if (root / "metadata").exists() else None
    source = root / "sources" / "0" / "0"
    out["sources_0_0"] = source.read_bytes()[:4].decode("latin-1") if source.exists() else None
    crc = Counter()
    for f in files:
        name = f.rsplit("/", 1)[-1]
        if name.endswith(".crc"):
            crc[("hadoop ." if name.startswith(".") else "spark ") + f.split("/", 1)[0] + ("/" if "/" in f else "")] += 1
    out["crc"] = dict(sorted(crc.items()))
    ops: dict[str, Any] = {}
    for f in files:
        parts = f.split("/")
        if parts[0] != "state" or len(parts) < 3 or parts[-1].endswith(".crc"):
            continue
        op = ops.setdefault(parts[1], {"metadata": set(), "state_files": set(), "other": set()})
        if parts[2] in ("_metadata", "_stateSchema"):
            op["metadata"].add("/".join(parts[2:-1] + ["<batch>" if parts[-1].isdigit() else parts[-1]]))
            continue
        m = _STATE_FILE.match(parts[-1])
        if m:
            op["state_files"].add(("<version>_<id>." if m.group(2) else "<version>.") + m.group(3))
        else:
            op["other"].add("/".join(parts[3:-1] + ["*"]) if len(parts) > 4 else parts[-1])
    out["state"] = {k: {kk: sorted(vv) for kk, vv in v.items()} for k, v in sorted(ops.items())}
    return out


def _take_snapshots(run: LineRun, store: LocalStore, bootstrap: str, producer: threading.Thread) -> None:
    """A snapshot of each checkpoint each time it commits a new batch, while the producer
    writes and until each has two of distinct batches."""
    taken: dict[str, int] = {}
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        for kind in STORES:
            if f"snapshot-{kind}" in run.errors:
                continue
            committed = CheckpointReader(str(run.checkpoint(kind))).committed_batches()
            if committed and committed[-1] > taken.get(kind, -1):
                try:
                    m = create_snapshot(str(run.checkpoint(kind)), store, f"accounts-{kind}", parallelism=4,
                                        kafka_bootstrap=bootstrap, spark_version=run.version.pyspark).manifest
                except StreamstateError as exc:
                    run.errors[f"snapshot-{kind}"] = exc.one_line()
                    continue
                taken[kind] = m.batch_id
                run.snapshots.setdefault(kind, []).append(m)
        enough = all(len({m.batch_id for m in run.snapshots.get(k, [])}) >= 2 or f"snapshot-{k}" in run.errors
                     for k in STORES)
        if not producer.is_alive() and enough:
            return
        time.sleep(0.3)


def _tasks(run: LineRun, others: list[LineRun]) -> list[dict[str, Any]]:
    """What the driver runs with its Spark once the live queries stopped (see its docstring);
    `others`: lines whose earliest snapshots it reads too (the main line's driver: the state
    jobs that run here use the main venv's Spark)."""
    tasks: list[dict[str, Any]] = [
        {"kind": "reader", "name": f"cross-{o.version.line}-{kind}", "store_url": f"file://{o.root / 'store'}",
         "stream": f"accounts-{kind}", "snapshot_id": o.snapshots[kind][0].snapshot_id}
        for o in others for kind in STORES if o.snapshots.get(kind)
    ]
    resumes: list[dict[str, Any]] = []  # after every read at the snapshots' batches, by group side by side
    after: list[dict[str, Any]] = []
    for kind in STORES:
        snaps = run.snapshots.get(kind) or []
        if not snaps:
            continue
        earliest = snaps[0]
        restored = run.root / f"restore-{kind}"
        tasks += [
            {"kind": "reader", "name": f"reader-{kind}", "store_url": f"file://{run.root / 'store'}",
             "stream": f"accounts-{kind}", "snapshot_id": earliest.snapshot_id},
            {"kind": "state", "name": f"original-at-snapshot-{kind}", "store": kind, "operator": 0,
             "checkpoint": str(run.checkpoint(kind)), "batch_id": earliest.batch_id},
            {"kind": "state", "name": f"original-dedup-at-snapshot-{kind}", "store": kind, "operator": 1,
             "checkpoint": str(run.checkpoint(kind)), "batch_id": earliest.batch_id},
            {"kind": "state", "name": f"original-final-{kind}", "store": kind, "operator": 0,
             "checkpoint": str(run.checkpoint(kind))},
        ]
        if restored.exists():
            tasks.append({"kind": "state", "name": f"restored-dedup-{kind}", "store": kind, "operator": 1,
                          "checkpoint": str(restored), "batch_id": earliest.batch_id})
            resumes.append({"kind": "resume", "name": f"resume-{kind}", "group": "restored", "store": kind,
                            "checkpoint": str(restored),
                            "topic": run.topic, "alerts_topic": f"{run.topic}-resumed-{kind}"})
            after.append({"kind": "state", "name": f"resumed-final-{kind}", "store": kind, "operator": 0,
                          "checkpoint": str(restored)})
        if kind in run.failovers:
            target = run.failovers[kind].target
            resumes.append({"kind": "resume", "name": f"failover-{kind}", "group": "failed-over", "store": kind,
                            "checkpoint": target,
                            "topic": run.dr_topic, "alerts_topic": f"{run.dr_topic}-resumed-{kind}"})
            after.append({"kind": "state", "name": f"failover-final-{kind}", "store": kind, "operator": 0,
                          "checkpoint": target})
    return [*tasks, *sorted(resumes, key=lambda t: t["group"], reverse=True), *after]


def _gx_task(run: LineRun) -> dict[str, Any]:
    """The GX run the driver does beside its live queries: the generator's final state of the
    accounts as a DataFrame, and gx_suite."""
    expected = expected_aggregates(run.specs)
    return {"kind": "gx", "name": "gx", "schema": "key_account STRING, value_count LONG, value_sum LONG, value_max LONG",
            "rows": [[a, v["count"], v["sum"], v["max"]] for a, v in sorted(expected.items())],
            "suite": gx_suite(expected), "data_docs": str(run.root / "data-docs")}


def gx_suite(expected: dict[str, dict[str, int]]) -> dict[str, Any]:
    """Five expectations that hold for the accounts' state, and one that fails for exactly
    the accounts with more transactions than the median account."""
    counts = sorted(v["count"] for v in expected.values())
    return {"name": "compat-accounts", "expectations": [
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "key_account"}},
        {"type": "expect_column_values_to_be_between", "kwargs": {"column": "value_sum", "min_value": 1}},
        {"type": "expect_column_values_to_be_unique", "kwargs": {"column": "key_account"}},
        {"type": "expect_table_row_count_to_equal", "kwargs": {"value": len(expected)}},
        {"type": "expect_table_row_count_to_be_between", "kwargs": {"min_value": 1, "max_value": 1000}},
        {"type": "expect_column_values_to_be_between",
         "kwargs": {"column": "value_count", "max_value": counts[len(counts) // 2]}},
    ]}


def _wait_for_file(path: Path, handle: Any, timeout_s: float) -> dict[str, Any] | None:
    """`path`'s JSON once the driver wrote it; None when the driver died or time ran out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            return json.loads(path.read_text())  # type: ignore[no-any-return]
        if not status(handle.checkpoint).process_alive:
            return json.loads(path.read_text()) if path.exists() else None
        time.sleep(0.2)
    return None


def _new_run(version: spark_versions.SparkVersion, bootstrap: str, root: Path) -> LineRun:
    tag = f"{version.line.replace('.', '')}-{uuid.uuid4().hex[:6]}"
    first = GeneratorSpec(seed=300 + version.major_minor[1], accounts=40, events=300, duplicate_rate=0.05)
    second = first.next_round(300)
    return LineRun(version, root, f"compat-{tag}", f"dr-compat-{tag}", [first, second], second.next_round(150),
                   bootstrap=bootstrap)


def _run_line(run: LineRun, others: list[LineRun]) -> None:
    """Everything one line runs (see the module docstring), into `run`; `others`: lines whose
    snapshots its driver reads too, once they are ready."""
    started = time.monotonic()
    version, root, bootstrap = run.version, run.root, run.bootstrap
    first, second = run.specs
    tag = run.topic.removeprefix("compat-")
    for t in (run.topic, run.dr_topic):
        ensure_topic(bootstrap, t, partitions=3)
    produce(bootstrap, run.topic, first)
    ctl = root / "ctl"
    ctl.mkdir()
    (ctl / "gx.json").write_text(json.dumps(_gx_task(run)))
    offsets_v2 = version.major_minor >= OFFSET_LOG_V2
    command = version.submit_command(supervised_application(), [
        str(DRIVER), "--bootstrap", bootstrap, "--topic", run.topic, "--ctl", str(ctl), "--gx", str(ctl / "gx.json"),
        *(a for kind in STORES for a in ("--checkpoint", f"{kind}={run.checkpoint(kind)}")),
        *(["--offsets-v2", str(run.checkpoint("offsets-v2"))] if offsets_v2 else []),
    ])
    handle = launch(command, stream=f"compat-{tag}", checkpoint=run.checkpoint("hdfs"), env=version.env(),
                    query_name="compat-hdfs", heartbeat_interval_s=1.0, log_dir=root / "logs")
    store = LocalStore(root / "store", fsync=False)
    try:
        wait_until_running(handle, timeout_s=180)
        run.seconds["start"] = time.monotonic() - started
        run.info = json.loads((ctl / "info.json").read_text())
        producer = threading.Thread(target=produce, args=(bootstrap, run.topic, second), kwargs={"rate": 250})
        producer.start()
        _take_snapshots(run, store, bootstrap, producer)
        producer.join()
        sent = _sent(bootstrap, run.topic)  # the generator's events and their duplicates
        for kind in STORES:
            wait_for(lambda k=kind: consumed_records(str(run.checkpoint(k))) >= sent, 120, f"{kind} to drain")
        (ctl / "stop-live").touch()
        live = _wait_for_file(ctl / "live.json", handle, 90)
        if live is None or live["errors"]:
            run.errors["live"] = f"the live queries failed: {live}" if live else "the driver died"
            return
        run.seconds["live"] = time.monotonic() - started
        if offsets_v2:
            run.layout["offsets-v2"] = describe_checkpoint(run.checkpoint("offsets-v2"))
            try:
                m = create_snapshot(str(run.checkpoint("offsets-v2")), store, "accounts-offsets-v2",
                                    kafka_bootstrap=bootstrap, spark_version=version.pyspark).manifest
                run.snapshots["offsets-v2"] = [m]
            except StreamstateError as exc:
                run.errors["snapshot-offsets-v2"] = exc.one_line()
        for kind in STORES:
            run.layout[kind] = describe_checkpoint(run.checkpoint(kind))
            snaps = run.snapshots.get(kind) or []
            if not snaps:
                continue
            try:
                restore_snapshot(store, f"accounts-{kind}", snaps[0].snapshot_id, root / f"restore-{kind}", fsync=False)
            except StreamstateError as exc:
                run.errors[f"restore-{kind}"] = exc.one_line()
        mirror(bootstrap, run.topic, run.dr_topic, 3)
        produce(bootstrap, run.dr_topic, run.dr_spec)

        def fail_over(kind: str) -> None:
            try:
                run.failovers[kind] = failover(store, f"accounts-{kind}", root / f"dr-{kind}", bootstrap,
                                               topic_map=TopicMap({run.topic: run.dr_topic}), parallelism=4)
            except StreamstateError as exc:
                run.errors[f"failover-{kind}"] = exc.one_line()

        with ThreadPoolExecutor(len(STORES)) as pool:  # two streams, two failovers at once
            list(pool.map(fail_over, [k for k in STORES if run.snapshots.get(k)]))
        run.seconds["engine"] = time.monotonic() - started
        run.ready.set()
        for other in others:
            other.ready.wait(TASK_WAIT_S)
        tmp = ctl / ".tasks.json"
        tmp.write_text(json.dumps(_tasks(run, others)))
        tmp.rename(ctl / "tasks.json")
        results = _wait_for_file(ctl / "results.json", handle, 300)
        if results is None:
            partial = ctl / "results.partial.json"
            run.results = json.loads(partial.read_text()) if partial.exists() else {}
            run.errors["tasks"] = "the driver died or timed out running its tasks; see " + handle.log
        else:
            run.results = results
        wait_for(lambda: not status(handle.checkpoint).process_alive, 60, "the driver to exit")
        record = read_driver(handle.checkpoint, handle.launch_id)
        run.driver_exit = record.exit_code if record is not None else None
    finally:
        (ctl / "abort").touch()
        if status(handle.checkpoint).process_alive:
            stop(handle, timeout_s=20)
        run.ready.set()
        run.seconds["total"] = time.monotonic() - started


def _sent(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compat-count", "log_level": 0})
    try:
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(3))
    finally:
        consumer.close()


REPORT: dict[str, Any] = {}
RUNS: dict[str, LineRun] = {}  # line -> its run
# The main line last: its driver also reads the snapshots the other lines' streams wrote.
LINES = sorted(spark_versions.SUPPORTED, key=lambda v: v.main)
OTHER_LINES = [v for v in LINES if not v.main]
# Lines whose drivers run at once: two on two cores (half of a driver's time is waiting on
# triggers, the broker and JVM start); 1 runs them one after the other.
PARALLEL = int(os.environ.get("STREAMSTATE_COMPAT_PARALLEL", "2"))
TASK_WAIT_S = 300.0


def _guarded(run: LineRun, others: list[LineRun]) -> None:
    try:
        _run_line(run, others)
    except BaseException as exc:  # noqa: BLE001 - this line's tests fail with it, the others still run
        run.errors["run"] = f"{type(exc).__name__}: {exc}"
    finally:
        run.ready.set()


@pytest.fixture(scope="module")
def line_runs(request: pytest.FixtureRequest, stack: Any, tmp_path_factory: pytest.TempPathFactory,
              spark_as_shipped: None) -> dict[str, LineRun]:
    """Every line the selected tests ask for, PARALLEL at a time, the main line last (with
    Spark's default code generation: what each line does is this module's question)."""
    params = [item.callspec.params for item in request.session.items  # type: ignore[attr-defined]
              if item.path == request.path and hasattr(item, "callspec")]
    wanted = {p["line"].line for p in params if "line" in p} | {p["other"].line for p in params if "other" in p}
    if any("other" in p for p in params):
        wanted.add(spark_versions.MAIN_LINE)
    versions = [v for v in LINES if v.line in wanted and v.installed()]
    for v in versions:
        RUNS[v.line] = _new_run(v, stack.kafka_bootstrap, tmp_path_factory.mktemp(f"spark-{v.line}"))
    with ThreadPoolExecutor(max(1, PARALLEL), thread_name_prefix="compat-line") as pool:
        for v in versions:
            others = [RUNS[o.line] for o in versions if not o.main] if v.main else []
            pool.submit(_guarded, RUNS[v.line], others)
    for v in versions:
        run = RUNS[v.line]
        REPORT[v.line] = {
            "pyspark": v.pyspark, "connector": v.connector, "info": run.info, "errors": run.errors,
            "seconds": {k: round(x, 1) for k, x in run.seconds.items()}, "layout": run.layout,
            "snapshot_batches": {k: [m.batch_id for m in ms] for k, ms in run.snapshots.items()},
            "task_seconds": {k: r.get("seconds") for k, r in run.results.items()},
            "task_errors": {k: r["error"] for k, r in run.results.items() if "error" in r},
        }
    report = os.environ.get("STREAMSTATE_COMPAT_REPORT")
    if report:
        Path(report).write_text(json.dumps(REPORT, indent=1, sort_keys=True, default=str))
    return RUNS


@pytest.fixture(scope="module", params=LINES, ids=_id)
def line(request: pytest.FixtureRequest, line_runs: dict[str, LineRun]) -> LineRun:
    version: spark_versions.SparkVersion = request.param
    if version.line not in line_runs:
        pytest.skip(f"Spark {version.line} is not installed here: run `make setup`")
    run = line_runs[version.line]
    assert "run" not in run.errors, run.errors["run"]
    return run


def test_the_driver_runs_that_spark_with_that_lines_python_and_exits_cleanly(line: LineRun) -> None:
    v = line.version
    assert line.info, line.errors
    assert line.info["python"] == str(v.python)
    assert line.info["pyspark"] == v.pyspark and line.info["spark"] == v.pyspark  # Python and JVM side
    assert line.info["spark_home"] == str(v.spark_home)
    assert line.info["worker_python"] == str(v.python)
    assert not line.errors.get("live") and not line.errors.get("tasks"), line.errors
    assert line.driver_exit == 0


def test_snapshots_under_load_restore_elsewhere_and_continue_exactly(line: LineRun) -> None:
    """Each store: two or more snapshots of distinct batches taken while the stream ran; the
    earliest restored elsewhere resumes with the next batch, and every account it updates
    ends exactly where the uninterrupted run and the generator say."""
    expected = expected_aggregates(line.specs)
    for kind in STORES:
        assert f"snapshot-{kind}" not in line.errors and f"restore-{kind}" not in line.errors, line.errors
        snaps = line.snapshots[kind]
        assert len({m.batch_id for m in snaps}) >= 2, [m.batch_id for m in snaps]
        assert all(m.state_store == kind for m in snaps)
        # Spark 3.5 writes no operator metadata (state/<op>/_metadata/metadata): the engine
        # names its operators `unknown` and takes their stores from the layout.
        names = ["unknown"] * 2 if line.version.major_minor < (4, 0) else ["stateStoreSave", "dedupeWithinWatermark"]
        assert [op.name for op in snaps[0].operators] == names
        assert [op.stores for op in snaps[0].operators] == [["default"], ["default"]]
        # The uninterrupted run's own output: every account's final state.
        assert line.last_alert_per_account(f"{line.topic}-live-{kind}") == expected
        earliest = snaps[0]
        resumed = line.result(f"resume-{kind}")
        assert resumed["batches"][0] == earliest.batch_id + 1
        touched = line.accounts_from(line.topic, earliest.kafka_offsets[line.topic])
        assert touched, "the earliest snapshot was taken after all input"
        assert line.last_alert_per_account(f"{line.topic}-resumed-{kind}") == {a: expected[a] for a in touched}


def test_a_failover_rewrite_resumes_on_the_dr_topic_with_that_spark(line: LineRun) -> None:
    """The newest snapshot, failed over onto the DR topic (its mirrored history plus more),
    resumes with the next batch at the translated offsets and ends in the state of the
    whole history."""
    expected = expected_aggregates([*line.specs, line.dr_spec])
    for kind in STORES:
        assert f"failover-{kind}" not in line.errors, line.errors
        result = line.failovers[kind]
        assert f"offsets/{result.batch_id}" in result.rewritten
        resumed = line.result(f"failover-{kind}")
        assert resumed["batches"][0] == result.batch_id + 1
        translated = {str(p.partition): p.dr_offset for p in result.translated}
        touched = line.accounts_from(line.dr_topic, translated)
        assert line.last_alert_per_account(f"{line.dr_topic}-resumed-{kind}") == {a: expected[a] for a in touched}


def test_state_queries_of_the_snapshots_run_on_that_spark(line: LineRun) -> None:
    """With the line's own Spark: the engine's StateReader on the earliest snapshot equals
    Spark's state at that batch and what the recorded offsets imply; the restored copy's
    deduplication state is the original's; the continued copies end in the generator's state.
    A Spark without the state data source (3.5) is refused in one line naming its version (its
    snapshots are read by the main line's Spark: test_the_main_venvs_spark_reads_...)."""
    if line.version.major_minor < (4, 0):
        for kind in STORES:
            error = line.results[f"reader-{kind}"].get("error", "")
            assert f"Spark {line.version.pyspark} has no state data source" in error, (NO_STATE_SOURCE, error)
            assert "\n" not in error
        return
    for kind in STORES:
        earliest = line.snapshots[kind][0]
        read = line.result(f"reader-{kind}")
        assert read["state"] == line.result(f"original-at-snapshot-{kind}")
        assert read["state"] == line.oracle_state(earliest.kafka_offsets)
        assert {s["operator_name"] for s in read["stores"]} == {"stateStoreSave", "dedupeWithinWatermark"}
        assert line.result(f"restored-dedup-{kind}") == line.result(f"original-dedup-at-snapshot-{kind}")
        assert line.result(f"original-final-{kind}") == expected_aggregates(line.specs)
        assert line.result(f"resumed-final-{kind}") == expected_aggregates(line.specs)
        assert line.result(f"failover-final-{kind}") == expected_aggregates([*line.specs, line.dr_spec])


def test_great_expectations_validates_a_spark_dataframe_on_that_spark(line: LineRun) -> None:
    """GX Core (the main lock's version, without its `spark` extra's pin) through the engine's
    validation, on the line's own Spark: not null, between, unique and row counts pass, and
    the failing `between` counts exactly the accounts above the bound, with Data Docs."""
    expected = expected_aggregates(line.specs)
    bound = gx_suite(expected)["expectations"][-1]["kwargs"]["max_value"]
    above = sum(1 for v in expected.values() if v["count"] > bound)
    assert 0 < above < len(expected)
    out = line.result("gx")
    assert out["gx_version"] == "1.24.1"
    assert out["success"] is False
    got = {(r["type"], r["kwargs"].get("column")): r for r in out["results"]}
    assert {k: (r["success"], r["exception"]) for k, r in got.items()} == {
        ("expect_column_values_to_not_be_null", "key_account"): (True, None),
        ("expect_column_values_to_be_between", "value_sum"): (True, None),
        ("expect_column_values_to_be_unique", "key_account"): (True, None),
        ("expect_table_row_count_to_equal", None): (True, None),
        ("expect_table_row_count_to_be_between", None): (True, None),
        ("expect_column_values_to_be_between", "value_count"): (False, None),
    }
    assert got[("expect_table_row_count_to_equal", None)]["observed"] == len(expected)
    failed = got[("expect_column_values_to_be_between", "value_count")]["observed"]
    assert failed["unexpected_count"] == above and failed["partial_unexpected_list"]
    assert out["data_docs_written"]


@pytest.mark.parametrize("line", [v for v in LINES if v.major_minor >= OFFSET_LOG_V2], ids=_id, indirect=True)
def test_a_stream_with_offset_log_format_2_is_refused_in_one_line_naming_it(line: LineRun) -> None:
    """Spark 4.3's opt-in offset log format 2 (`v2`, each source's offsets keyed by its id; the
    lines before have none): the engine's checkpoint reader understands `v1` only and refuses
    such a checkpoint in one line that names the format, the version and the setting that
    avoids it."""
    layout = line.layout["offsets-v2"]
    assert layout["offsets"]["header"] == "v2"  # what this Spark wrote: the refusal below is the engine's
    error = line.errors.get("snapshot-offsets-v2", "")
    assert "is in offset log format v2 (Spark 4.3's opt-in" in error and "offsetLog.formatVersion=1" in error, error


def test_the_checkpoint_layout_is_what_the_engine_expects(line: LineRun) -> None:
    """The per-line facts the engine's checkpoint reader depends on (the whole description
    goes to STREAMSTATE_COMPAT_REPORT)."""
    for kind in STORES:
        layout = line.layout[kind]
        assert layout["offsets"]["header"] == "v1"
        assert layout["commits"]["header"] == "v1"
        assert layout["metadata"] == ["id"]
        assert "spark.sql.streaming.stateStore.providerClass" in layout["offsets"]["conf"]
        assert len(layout["offsets"]["source_lines"]) == 1
        assert set(json.loads(layout["offsets"]["source_lines"][0])) == {line.topic}


@pytest.mark.parametrize("other", OTHER_LINES, ids=_id)
def test_the_main_venvs_spark_reads_that_lines_snapshots(other: spark_versions.SparkVersion,
                                                        line_runs: dict[str, LineRun]) -> None:
    """State jobs that run here (the default) read snapshots with the main venv's Spark 4.1:
    its driver read the earliest snapshot of each store of every other line, exactly."""
    main = line_runs.get(spark_versions.MAIN_LINE)
    run = line_runs.get(other.line)
    if main is None or run is None:
        pytest.skip(f"Spark {other.line} or the main line is not installed here: run `make setup`")
    for kind in STORES:
        earliest = run.snapshots[kind][0]
        read = main.result(f"cross-{other.line}-{kind}")
        assert read["state"] == run.oracle_state(earliest.kafka_offsets)
