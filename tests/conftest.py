"""Shared fixtures: one local stack (real Kafka broker, two S3 endpoints) for the whole run,
shared by the pytest-xdist workers (tests/shared_parts.py), and one Spark session per test
process, both from the same code the demo and benchmarks use."""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests import airflow_harness, shared_parts, spark_jvm  # noqa: E402
from tests.components import (  # noqa: E402
    COLLECTED_MARKERS,
    last_users,
    marker_of_part,
    require_marker,
    unmarked_components,
)
from tests.s3 import s3_client  # noqa: E402

# Airflow reads its home, DB and DAG folder at import: keep them out of the user's ~/airflow.
# One home per test process (each xdist worker has its own), even if this module were
# imported twice (see tests/s3.py): the harness module, imported once, keeps it.
if airflow_harness.HOME is None:
    airflow_harness.HOME = Path(tempfile.mkdtemp(prefix="streamstate-airflow-"))
    airflow_harness.configure_airflow_env(airflow_harness.HOME)
_AIRFLOW_HOME = airflow_harness.HOME

from dev import local_fs, spark_cds  # noqa: E402
from dev import stack as stack_mod  # noqa: E402

# Every Spark JVM the suite starts through spark-submit (sessions here, drivers, state jobs,
# the other Spark lines) inherits this: the suite is CPU-bound on two cores. With the class
# data sharing archive `make setup` builds (dev/spark_cds.py), a JVM of the main venv's Spark
# maps the classes it would load and verify again: about half the CPU of a short session.
os.environ.setdefault("SPARK_SUBMIT_OPTS", spark_cds.jvm_opts())
# ... and Hadoop's local filesystem without a process per chmod or readlink on their class path
# (dev/local_fs.py), after whatever SPARK_DIST_CLASSPATH already holds: a stateful query's
# micro-batch on a local checkpoint took two fifths of the CPU with it.
if (_dist_classpath := local_fs.with_local_fs(os.environ.get(local_fs.ENV))) is not None:
    os.environ[local_fs.ENV] = _dist_classpath

# The suite's checkpoints are written a moment before a test works on them, by queries that
# have stopped (or by the test itself) and often keep no heartbeat: what a query not started
# by streamstate looks like (liveness.unmanaged_writer). So its window is closed for every
# test and fixture of the run, and opened again by the tests of that detection
# (tests/unit/test_unmanaged_writer.py, tests/integration/test_swap_crashes.py).
os.environ.setdefault("STREAMSTATE_UNMANAGED_WINDOW_S", "0")

# py4j logs at interpreter exit, after pytest closed its capture streams.
logging.getLogger("py4j").setLevel(logging.WARNING)


DURATIONS = Path(__file__).resolve().parent / "durations.json"


@pytest.hookimpl(tryfirst=True)  # before -k and -m deselect
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every component a test uses is in its marks (tests/components.py). Then longest files
    first (seconds per file in tests/durations.json, from a whole run by
    dev/test_durations.py): xdist hands whole files to whichever worker is free, so the two
    workers end together instead of one idling while the other runs the last heavy file.
    Files the record does not know run last, in collection order; tests within a file keep
    theirs."""
    for item, marker in unmarked_components(items):
        # A failure of the test itself, not a collection error: an xdist worker that raises
        # here ends its session silently and the controller reports only an internal error.
        item.add_marker(pytest.mark.unmarked_component(marker))
    collected: dict[str, set[str]] = {}
    for item in items:
        collected.setdefault(item.nodeid.split("::")[0], set()).update(m.name for m in item.iter_markers())
    config.stash[COLLECTED_MARKERS] = collected
    if not DURATIONS.exists():
        return
    import json

    seconds: dict[str, float] = json.loads(DURATIONS.read_text())
    rootdir = Path(str(config.rootpath))

    def weight(item: pytest.Item) -> float:
        try:
            rel = Path(str(item.path)).relative_to(rootdir).as_posix()
        except ValueError:
            return -1.0
        return seconds.get(rel, -1.0)

    items.sort(key=lambda item: -weight(item))


# The run's files in order with the position of each, and the position of the last file
# that uses each component (tests/components.py): what `pytest_runtest_setup` lets go of.
_FILE_POSITION = pytest.StashKey[dict[str, int]]()
_LAST_USER = pytest.StashKey[dict[str, int]]()
_MARKERS_LET_GO = pytest.StashKey[set[str]]()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Plan when each shared part may be let go, from the items as they will run (after every
    plugin reordered or deselected them): every process of the run collects the same items in
    the same order and xdist hands the files out in that order (--dist loadfile
    --no-loadscope-reorder), so a process that starts a file later than the last user of a
    component will not need that component again."""
    files: dict[str, set[str]] = {}
    for item in session.items:
        files.setdefault(str(item.path), set()).update(m.name for m in item.iter_markers())
    session.config.stash[_FILE_POSITION] = {path: i for i, path in enumerate(files)}
    session.config.stash[_LAST_USER] = last_users(list(files.items()))
    session.config.stash[_MARKERS_LET_GO] = set()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Let go of the shared parts no file from here on uses (the last holder stops them)."""
    position = item.config.stash.get(_FILE_POSITION, {}).get(str(item.path))
    if position is None:
        return
    last, gone = item.config.stash[_LAST_USER], item.config.stash[_MARKERS_LET_GO]
    needed = {m.name for m in item.iter_markers()} & gone
    if needed:  # not the planned order (e.g. a crashed worker's files handed out again): say so
        pytest.fail(f"{item.nodeid} needs {sorted(needed)}, which this process let go of after the last file that "
                    "used it: files ran out of collection order (a crashed worker's files go to the end of the "
                    "queue); rerun this file alone")
    for part in shared_parts.held():
        marker = marker_of_part(part)
        if marker is not None and last.get(marker, -1) < position:
            gone.add(marker)
            try:
                shared_parts.let_go(part)
            except Exception as exc:  # noqa: BLE001 - a part that fails to stop is no failure of this test
                warnings.warn(f"letting go of {part} failed: {exc}", stacklevel=1)


def throwaway_down(state_dir: Path) -> None:
    """`down` for a test stack: its data goes with it, so no part is given long to stop."""
    stack_mod.down(state_dir, grace_s=3.0)


@pytest.fixture(scope="session")
def shared_root(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Path:
    """The run's directory for the parts every test process shares (tests/shared_parts.py)."""
    return shared_parts.shared_root(tmp_path_factory, pytestconfig)


@pytest.fixture(scope="session")
def stack(shared_root: Path) -> Iterator[stack_mod.Stack]:
    """The stack (a Kafka broker, two moto S3 regions), one for the whole run: started by the
    first test process that asks for it, stopped after the last one is done."""
    def start(state_dir: Path) -> dict[str, Any]:
        return stack_mod.up(state_dir).to_json()

    for info in shared_parts.hold(shared_root, "stack", start, throwaway_down):
        state_dir = str((shared_root / "shared" / "stack").resolve())
        yield stack_mod.Stack(info["kafka_bootstrap"], dict(info["s3"]), list(info["spark_jars"]), state_dir)


@pytest.fixture(scope="session")
def s3proxy(stack: stack_mod.Stack, shared_root: Path) -> Iterator[dict[str, str]]:
    """s3proxy, a second S3 implementation, as the stack's S3 region `s3proxy`: started only
    when a test asks for it (about 8 s), one for the whole run."""
    def stop(state_dir: Path) -> None:
        stack_mod.stop_part(state_dir, stack_mod.S3PROXY_PART)
        shutil.rmtree(state_dir / "s3proxy-data", ignore_errors=True)

    for info in shared_parts.hold(shared_root, "s3proxy", stack_mod.start_s3proxy, stop):
        stack.s3[stack_mod.S3PROXY] = info
        shared_parts.also_on_let_go("s3proxy", lambda: stack.s3.pop(stack_mod.S3PROXY, None))
        try:
            yield info
        finally:
            stack.s3.pop(stack_mod.S3PROXY, None)


@pytest.fixture(scope="session")
def spark(stack: stack_mod.Stack):  # noqa: ANN201 - pyspark is imported lazily
    import pyspark

    from airflow_provider_streamstate.engine.state.spark import spark_session
    from tests.streams import local_checkpoint_conf

    # Fast maintenance: snapshots, zips and cleanup happen while tests take snapshots.
    spark_jvm.shut_down_foreign_jvm()  # one left by a test before: it lacks the Kafka connector
    session = spark_session(
        "streamstate-tests",
        stack.spark_jars,
        conf={"spark.sql.streaming.stateStore.maintenanceInterval": "1s", **local_checkpoint_conf(pyspark.__version__)},
    )
    spark_jvm.mark_shared(session)
    yield session
    spark_jvm.stop_queries_left_running()
    session.stop()


@pytest.fixture
def spark_default_checkpoint_manager(spark):  # noqa: ANN001, ANN201
    """The shared session with Spark's default checkpoint file manager (FileContext where the
    scheme has one, as on S3A and HDFS), for a test of a stream checkpointing to remote
    storage: the session's own choice is for local disks (tests/streams.py)."""
    from tests.streams import CHECKPOINT_FILE_MANAGER_CONF

    spark.conf.unset(CHECKPOINT_FILE_MANAGER_CONF)  # set again after the test (_spark_conf_restored)
    return spark


@pytest.fixture(scope="module")
def spark_as_shipped() -> Iterator[None]:
    """Spark's default code generation and Hadoop's own local filesystem for the Spark
    applications a module starts (the suite's JVMs interpret SQL, dev/spark_cds.py, and set
    permissions without a process, dev/local_fs.py), for the tests of what each Spark line
    itself does: the version matrix and the drift check's runs of other lines' Spark."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPARK_SUBMIT_OPTS", spark_cds.with_compiled_sql(os.environ.get("SPARK_SUBMIT_OPTS", "")))
        if (classpath := local_fs.hadoops_own(os.environ).get(local_fs.ENV)) is None:
            mp.delenv(local_fs.ENV, raising=False)
        else:
            mp.setenv(local_fs.ENV, classpath)
        yield


@pytest.fixture
def spark_compiled_sql_in_session(spark):  # noqa: ANN001, ANN201
    """The shared session with Spark's default code generation (restored after the test by
    `_spark_conf_restored`): SQL confs a query reads when it starts."""
    for conf, (_, default) in spark_cds.SQL_CODE_GENERATION.items():
        spark.conf.set(conf, default)
    return spark


@pytest.fixture(autouse=True)
def _component_marked(request: pytest.FixtureRequest) -> None:
    """A test that uses a component's fixture without its marker fails, naming the marker."""
    mark = request.node.get_closest_marker("unmarked_component")
    if mark is not None:
        pytest.fail(f"{request.node.nodeid} starts the {mark.args[0]} component: mark it "
                    f"`pytest.mark.{mark.args[0]}` (see tests/components.py)")


@pytest.fixture(scope="module", autouse=True)
def _probe_processes_end_with_their_file() -> Iterator[None]:
    """The Spark processes a file's probe steps kept (tests/spark_probe.py) end with the file."""
    yield
    probes = sys.modules.get("tests.spark_probe")
    if probes is not None:
        probes.close_all()


@pytest.fixture(scope="module", autouse=True)
def _no_query_left_running(request: pytest.FixtureRequest) -> Iterator[None]:
    """A query a file leaves running in the shared session is stopped with the file (after the
    file's own fixtures), and named in a warning: it would go on taking micro-batches, and
    CPU, through every later file of the test process."""
    yield
    left = spark_jvm.stop_queries_left_running()
    if left:
        warnings.warn(f"{request.node.nodeid} left {len(left)} queries running in the shared Spark session: "
                      f"{', '.join(left)}; stop them in the test or its fixture", stacklevel=1)


@pytest.fixture(autouse=True)
def _no_jvm_left_behind() -> Iterator[None]:
    """A JVM the engine started in this process during the test (without the Kafka
    connector, its session stopped) goes with the test: tests/spark_jvm.py says why. One
    that was there before (a module's own, if one ever makes it) is left alone."""
    before = spark_jvm.current_gateway()
    yield
    after = spark_jvm.current_gateway()
    if after is not before and spark_jvm.shut_down_foreign_jvm(only=after):
        logging.getLogger(__name__).info("shut down the JVM a test's own Spark session left behind")


@pytest.fixture(autouse=True)
def _spark_conf_restored(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that changes the shared session's conf (`use_state_store`, batches to retain...)
    leaves it as it found it: a later test's query must not inherit, say, a 5-batch log."""
    if "spark" not in request.fixturenames:
        yield
        return
    session = request.getfixturevalue("spark")
    before = dict(session.conf.getAll)
    yield
    after = dict(session.conf.getAll)
    for key in after.keys() - before.keys():
        session.conf.unset(key)
    for key, value in before.items():
        if after.get(key) != value:
            session.conf.set(key, value)


@pytest.fixture
def topic(stack: stack_mod.Stack) -> str:
    """A fresh 3-partition topic name for one test."""
    from airflow_provider_streamstate.jobs.generator import ensure_topic

    name = f"t-{uuid.uuid4().hex[:10]}"
    ensure_topic(stack.kafka_bootstrap, name, partitions=3)
    return name


# Every kind of snapshot store: the store contract tests run on each (`store_kind`), so a
# new backend is one line here (and its branch in make_store); a store that starts a
# component carries its marker.
STORE_KINDS = ["local", "s3", pytest.param("s3proxy", marks=pytest.mark.s3proxy),
               pytest.param("hdfs", marks=pytest.mark.hdfs)]


@pytest.fixture
def make_store(stack: stack_mod.Stack, tmp_path: Path, request: pytest.FixtureRequest):  # noqa: ANN201
    """make_store("local"|"s3"|"dr"|"s3proxy"|"hdfs") -> (store, url, env): a fresh, empty
    snapshot store (`s3`: the primary moto region; `dr`: the other; `s3proxy`: s3proxy,
    started lazily; `hdfs`: the stack's HDFS, started lazily) and the environment a process
    opens it with."""
    from airflow_provider_streamstate.backends.hdfs.store import HdfsStore
    from airflow_provider_streamstate.backends.hdfs.webhdfs import HdfsPath, WebHdfs
    from airflow_provider_streamstate.backends.local.store import LocalStore
    from airflow_provider_streamstate.backends.s3.store import S3Store

    def make(kind: str):  # noqa: ANN202
        if kind == "local":
            root = tmp_path / f"store-{uuid.uuid4().hex[:6]}"
            return LocalStore(root), f"file://{root}", {}
        if kind == "hdfs":
            require_marker(request, "hdfs")
            hdfs = request.getfixturevalue("hdfs")
            url = hdfs.url(f"/stores/{uuid.uuid4().hex[:10]}")
            client = WebHdfs.for_authority(HdfsPath.parse(url).authority, env=hdfs.env())
            return HdfsStore(url, client=client), url, hdfs.env()
        region = {"s3": "primary"}.get(kind, kind)
        if region == stack_mod.S3PROXY:
            require_marker(request, "s3proxy")
            request.getfixturevalue("s3proxy")
        prefix = f"tests/{uuid.uuid4().hex[:10]}"
        bucket = stack.s3[region]["bucket"]
        return S3Store(s3_client(stack, region), bucket, prefix), f"s3://{bucket}/{prefix}", stack.s3_env(region)

    return make


@pytest.fixture(params=STORE_KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    """Each kind of snapshot store in turn: a test that takes it proves the store contract
    on every backend."""
    return str(request.param)


@pytest.fixture(scope="session")
def airflow_dags() -> Path:
    """Airflow's metadata DB migrated and the DAG folder filled, once per session."""
    airflow_harness.prepare_airflow(_AIRFLOW_HOME)
    return _AIRFLOW_HOME / "dags"


@pytest.fixture
def run_dag(airflow_dags: Path):  # noqa: ANN201
    """run_dag(dag_id, conf) -> DagResult: one real DAG run with `dag.test()`."""
    return airflow_harness.run_dag
