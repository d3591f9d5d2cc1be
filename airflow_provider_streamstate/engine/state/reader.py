"""State as a table: one stateful operator's state of a snapshot (or of a live checkpoint
at a batch) as a Spark DataFrame with plain columns, and the state metadata beside it.

Spark's state data source (`format("statestore")`) gives `key` and `value` structs and
`partition_id`. Suites and SQL are easier to write against flat columns, so each leaf of
the key becomes `key_<field>` and each leaf of the value `value_<field>`, nested structs
joined with `_` (a window key gives `key_window_start`, `key_window_end`); the value
fields are the names Spark's state reader gives them (an aggregate's buffer names:
`value_count`, `value_sum`, `value_max`). docs/state.md has the full naming.

A snapshot is materialised once per `StateReader`: on this machine (restored as a clone, fresh
query id, no timeline, without fsync, into a temp directory `close()` removes), or, for a
state job on a cluster, as a scratch checkpoint inside the snapshot store itself
(engine/state/scratch.py: server-side copies, read by the executors where it is). The
DataFrames stay valid until `close()`. The reader keeps one SparkSession for all the
snapshots it opens (a bisect must not start Spark per step) and reads each snapshot in a
child session of it (`newSession()`: same SparkContext, own SQL confs) that carries the
state store confs that snapshot's checkpoint pinned: two snapshots read side by side (a
diff) never share one conf, and the caller's session is never changed. Before the first read
it touches the parent session's `spark.streams.active` (once per SparkContext is enough; a
child session that did would add a listener bus to the context for good): PySpark 4.1
cannot load a RocksDB store offline otherwise (`Cannot find endpoint StateStoreCoordinator`).

pyspark is imported only inside the functions that use it.
"""

from __future__ import annotations

import logging
import posixpath
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_provider_streamstate.engine.catalog.snapshots import resolve_snapshot
from airflow_provider_streamstate.engine.checkpoint.operator_metadata import state_variables_of
from airflow_provider_streamstate.engine.checkpoint.reader import FORMAT_VERSION_CONF, CheckpointReader
from airflow_provider_streamstate.engine.checkpoint.state_schemas import migration_after, schema_file
from airflow_provider_streamstate.engine.core.errors import (
    NotFoundError,
    UnsupportedCheckpointError,
    UsageError,
)
from airflow_provider_streamstate.engine.core.manifest import Manifest
from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.state.spark import require_pyspark, spark_session

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import DataType

    from airflow_provider_streamstate.engine.stores.base import SnapshotStore

log = logging.getLogger("streamstate.state")

JOIN_SIDES = ("left", "right")
ALL_VARIABLES = "*"  # every state variable of a transformWithState operator, `state_var` a column
TIMERS = "$timers"  # a transformWithState operator's registered timers
STATE_VAR_COLUMN = "state_var"
CHANGELOG_CONF = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
PARTITION_COLUMN = "partition_id"


@dataclass(frozen=True)
class StoreMetadata:
    """One state store of one operator, as Spark's `state-metadata` source reports it."""

    operator_id: int
    operator_name: str
    store_name: str
    partitions: int
    min_batch_id: int
    max_batch_id: int
    state_variables: tuple[tuple[str, str], ...] = ()  # transformWithState: (name, kind)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "operator_id": self.operator_id, "operator_name": self.operator_name, "store_name": self.store_name,
            "partitions": self.partitions, "min_batch_id": self.min_batch_id, "max_batch_id": self.max_batch_id,
        }
        if self.state_variables:
            out["state_variables"] = [{"name": n, "kind": k} for n, k in self.state_variables]
        return out


@dataclass(frozen=True)
class StateMetadata:
    """Every stateful operator's stores of a checkpoint, and the batches its state covers."""

    batch_id: int  # the batch whose state the DataFrames show
    stores: list[StoreMetadata]

    @property
    def operators(self) -> dict[int, str]:
        return {s.operator_id: s.operator_name for s in self.stores}

    def to_json(self) -> dict[str, Any]:
        return {"batch_id": self.batch_id, "stores": [s.to_json() for s in self.stores]}


@dataclass(frozen=True)
class StateSelector:
    """Which state to read: an operator (id or name; default: operator 0), optionally one
    named store of it, or one side of a stream-stream join."""

    operator: int | str | None = None
    store_name: str | None = None
    join_side: str | None = None
    # transformWithState: one state variable, ALL_VARIABLES or TIMERS (required there).
    state_var: str | None = None

    def describe(self) -> str:
        parts = [f"operator {self.operator if self.operator is not None else 0}"]
        if self.store_name:
            parts.append(f"store {self.store_name}")
        if self.join_side:
            parts.append(f"{self.join_side} side")
        if self.state_var:
            parts.append(f"state variable {self.state_var}")
        return ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"operator": self.operator, "store_name": self.store_name, "join_side": self.join_side}
        if self.state_var:
            out["state_var"] = self.state_var
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any] | None) -> StateSelector:
        d = d or {}
        return cls(d.get("operator"), d.get("store_name") or None, d.get("join_side") or None,
                   d.get("state_var") or None)


@dataclass(frozen=True)
class _OperatorRef:
    operator_id: int
    name: str
    stores: tuple[str, ...]
    variables: tuple[tuple[str, str], ...] = ()  # transformWithState: (name, kind), timers included

    @property
    def user_variables(self) -> list[str]:
        return [n for n, kind in self.variables if kind != "TimerState"]

    def kind_of(self, state_var: str) -> str | None:
        return next((kind for n, kind in self.variables if n == state_var), None)


def _manifest_operators(manifest: Manifest) -> list[_OperatorRef]:
    return [_OperatorRef(o.operator_id, o.name, tuple(o.stores),
                         tuple((v["name"], v["kind"]) for v in o.state_variables)) for o in manifest.operators]


def _check_state_var(op: _OperatorRef, sel: StateSelector) -> None:
    """A transformWithState operator is read one state variable (or all, or its timers) at
    a time; any other operator has none to name."""
    label = f"operator {op.operator_id} ({op.name})"
    if not op.variables:
        if sel.state_var:
            raise UsageError(f"{label} is not a transformWithState operator: it has no state variables",
                             hint="leave --state-var out")
        return
    names = ", ".join(op.user_variables)
    if not op.user_variables:
        if sel.state_var != TIMERS:
            raise UsageError(f"{label} keeps only timers", hint=f"pass --state-var '{TIMERS}'")
        return
    choices = f"its state variables: {names}; or '{ALL_VARIABLES}' for all of them, '{TIMERS}' for its timers"
    if not sel.state_var:
        raise UsageError(f"{label} keeps several state variables: name one", hint=f"pass --state-var ({choices})")
    if sel.state_var == TIMERS:
        if not any(kind == "TimerState" for _, kind in op.variables):
            raise NotFoundError(f"{label} registers no timers", hint=f"choose a state variable ({names})")
        return
    if sel.state_var != ALL_VARIABLES and sel.state_var not in op.user_variables:
        raise NotFoundError(f"{label} has no state variable {sel.state_var!r}", hint=choices)


def _resolve_operator(available: list[_OperatorRef], sel: StateSelector, where: str) -> _OperatorRef:
    """The operator a selector names, or a NotFoundError listing what `where` holds."""
    listing = ", ".join(f"{o.operator_id} ({o.name})" for o in available) or "none (a stateless query)"
    if not available:
        raise NotFoundError(f"{where} holds no state", hint="a stateless query's snapshot has only offsets to show")
    wanted = sel.operator
    if wanted is None or wanted == "":
        wanted = 0
    if isinstance(wanted, str) and wanted.strip().isdigit():
        wanted = int(wanted.strip())
    if isinstance(wanted, int) and not isinstance(wanted, bool):
        found = [o for o in available if o.operator_id == wanted]
    else:
        found = [o for o in available if o.name == wanted]
        if len(found) > 1:
            raise UsageError(
                f"{where} has {len(found)} operators named {wanted}",
                hint=f"name one by id: {listing}",
            )
    if not found:
        raise NotFoundError(f"{where} has no stateful operator {wanted!r}", hint=f"operators there: {listing}")
    op = found[0]
    if sel.store_name and sel.store_name not in op.stores:
        raise NotFoundError(
            f"operator {op.operator_id} ({op.name}) of {where} has no state store {sel.store_name!r}",
            hint=f"its stores: {', '.join(op.stores)}",
        )
    if sel.join_side is not None:
        if sel.join_side not in JOIN_SIDES:
            raise UsageError(f"invalid join side {sel.join_side!r}", hint="give left or right")
        # A join keeps four stores, or (join state format 3) one with column families.
        if not any(s.startswith(f"{sel.join_side}-") for s in op.stores) and op.name != "symmetricHashJoin":
            raise UsageError(
                f"operator {op.operator_id} ({op.name}) of {where} is not a stream-stream join",
                hint="--join-side only applies to a join's operator; leave it out",
            )
        if sel.store_name:
            raise UsageError("give a store name or a join side, not both", hint="a join side reads both of its stores")
    _check_state_var(op, sel)
    return op


def canonical_selector(manifest: Manifest, sel: StateSelector) -> StateSelector:
    """The selector with its operator as the id the snapshot gives it (`stateStoreSave` and
    `0` name the same state), so stored results compare equal however it was named. A
    stateless snapshot's selector is left as it is (reading it fails later, clearly)."""
    if not manifest.operators:
        return sel
    op = _resolve_operator(_manifest_operators(manifest), sel, f"snapshot {manifest.snapshot_id} of {manifest.stream}")
    return StateSelector(op.operator_id, sel.store_name or None, sel.join_side or None, sel.state_var or None)


def state_variable_kind(manifest: Manifest, sel: StateSelector) -> str | None:
    """ValueState, ListState, MapState or TimerState for a selector naming one state
    variable of a snapshot's transformWithState operator; None otherwise."""
    if not manifest.operators or not sel.state_var:
        return None
    op = _resolve_operator(_manifest_operators(manifest), sel, f"snapshot {manifest.snapshot_id} of {manifest.stream}")
    return "TimerState" if sel.state_var == TIMERS else op.kind_of(sel.state_var)


# Spark's state reader columns -> the prefix of their leaves' flat names. transformWithState's
# list state gives one `list_element` row per element, its map state `user_map_key` and
# `user_map_value` rows; both are a variable's values, as a value state's `value`.
_TOP_COLUMNS = {"key": "key", "user_map_key": "map_key", "value": "value", "list_element": "value",
                "user_map_value": "value"}
_TTL_FIELDS = {"value", "ttlExpirationMs"}
TTL_COLUMN = "ttl_expiration_ms"


def _flat_columns(dtype: DataType, path: list[str], name: list[str]) -> list[tuple[list[str], str]]:
    """(struct path, column name) of every leaf below `path`, nested names joined with `_`. A
    value with TTL (`{value, ttlExpirationMs}`) is its value's leaves and `ttl_expiration_ms`."""
    from pyspark.sql.types import StructType

    if isinstance(dtype, StructType):
        if {f.name for f in dtype.fields} == _TTL_FIELDS:
            inner = dtype["value"].dataType
            return [*_flat_columns(inner, [*path, "value"], name), ([*path, "ttlExpirationMs"], TTL_COLUMN)]
        out: list[tuple[list[str], str]] = []
        for f in dtype.fields:
            out.extend(_flat_columns(f.dataType, [*path, f.name], [*name, f.name]))
        return out
    return [(path, "_".join(name))]


def flatten_state(df: DataFrame) -> DataFrame:
    """Spark's state data source as flat columns: `key` leaves as `key_<field>`, `value` leaves
    as `value_<field>` (nested structs joined with `_`), transformWithState's map keys as
    `map_key_<field>` and TTLs as `ttl_expiration_ms`, other columns (a timer's
    `expiration_timestamp_ms`) as they are, then `partition_id`.

    Two leaves that would get one name (`a_b` and `a.b`) are refused: a suite could not
    tell them apart.
    """
    from pyspark.sql import functions as F

    cols = []
    names: dict[str, str] = {}
    ordered = [c for c in _TOP_COLUMNS if c in df.columns] + \
        [c for c in df.columns if c not in _TOP_COLUMNS and c != PARTITION_COLUMN]
    for top in ordered:
        leaves = _flat_columns(df.schema[top].dataType, [top], [_TOP_COLUMNS.get(top, top)])
        for path, name in leaves:
            dotted = ".".join(path)
            if name in names:
                raise UsageError(
                    f"state fields {names[name]} and {dotted} would both be column {name}",
                    hint="rename one of them in the query, or read the raw state with Spark's state data source",
                )
            names[name] = dotted
            col = F.col(path[0])
            for part in path[1:]:
                col = col.getField(part)
            cols.append(col.alias(name))
    if PARTITION_COLUMN in df.columns:
        cols.append(F.col(PARTITION_COLUMN))
    return df.select(*cols)


def key_columns(df: DataFrame) -> list[str]:
    """What identifies a row: the grouping key, and a map state's key (and, reading all
    variables of a transformWithState operator, the variable)."""
    return [c for c in df.columns if c in ("key", STATE_VAR_COLUMN) or c.startswith(("key_", "map_key_"))]


def value_columns(df: DataFrame) -> list[str]:
    return [c for c in df.columns if c in ("value", TTL_COLUMN, "expiration_timestamp_ms") or c.startswith("value_")]


def _apply_pinned_confs(spark: SparkSession, conf: dict[str, str], state_store: str | None,
                        checkpoint_format: int = 1) -> None:
    """The state store confs the checkpoint pinned at batch 0 (provider, format versions,
    codec), and two that are not pinned but decide how state is read back: changelog
    checkpointing, and the checkpoint format (Spark reads a format 2 commit log only with it)."""
    for key, value in conf.items():
        if key.startswith("spark.sql.streaming."):
            spark.conf.set(key, value)
    if state_store in ("rocksdb", "rocksdb-changelog"):
        spark.conf.set(CHANGELOG_CONF, "true" if state_store == "rocksdb-changelog" else "false")
    spark.conf.set(FORMAT_VERSION_CONF, str(checkpoint_format))


STATE_READER_SINCE = (4, 0)  # Spark's state data source (`statestore`, `state-metadata`)


def require_state_reader(version: str, *, who: str = "this session") -> None:
    """Refuse, in one line naming the version, a Spark without the state data source (also
    before a job is submitted: a cluster round trip would only bring the same answer)."""
    try:
        line = tuple(int(x) for x in version.split(".")[:2])
    except ValueError:
        return  # a vendor's version string: let Spark answer
    if line < STATE_READER_SINCE:
        raise UnsupportedCheckpointError(
            f"Spark {version} has no state data source (`statestore`, Spark 4.0 added it): {who} "
            "cannot read a snapshot's state",
            hint="run state queries, validation and bisect with Spark 4.0 or later (SPARK_HOME or the spark "
            "connection's spark-binary, the main streamstate environment's, or a cluster's); snapshots of a "
            "Spark 3.5 stream read there exactly")


def _copy_sql_confs(parent: SparkSession, child: SparkSession) -> None:
    """The caller's SQL settings (shuffle partitions, time zone...) in a child session, all
    but the state store's, which each snapshot's checkpoint decides."""
    for key, value in parent.conf.getAll.items():
        if key.startswith("spark.sql.") and not key.startswith("spark.sql.streaming."):
            try:
                child.conf.set(key, value)
            except Exception:  # noqa: BLE001, S112 - a static conf: the child has it already
                continue


def _read(spark: SparkSession, checkpoint: str, batch_id: int, op: _OperatorRef, sel: StateSelector) -> DataFrame:
    """`spark`'s context must have its StateStoreCoordinator (`touch_streams`)."""
    if sel.state_var == ALL_VARIABLES:
        from pyspark.sql import functions as F

        frames = [_read(spark, checkpoint, batch_id, op, StateSelector(op.operator_id, sel.store_name, None, name))
                  .withColumn(STATE_VAR_COLUMN, F.lit(name)) for name in op.user_variables]
        seen: dict[str, tuple[str, str]] = {}
        for name, frame in zip(op.user_variables, frames, strict=True):
            for field in frame.schema.fields:
                kind = field.dataType.simpleString()
                other = seen.setdefault(field.name, (name, kind))
                if other[1] != kind:
                    raise UsageError(
                        f"state variables {other[0]} and {name} both have a column {field.name}, of types "
                        f"{other[1]} and {kind}: they cannot be read as one table",
                        hint="read them one at a time (--state-var NAME)",
                    )
        union = frames[0]
        for f in frames[1:]:
            union = union.unionByName(f, allowMissingColumns=True)
        cols = [STATE_VAR_COLUMN] + [c for c in union.columns if c not in (STATE_VAR_COLUMN, PARTITION_COLUMN)]
        return union.select(*cols, PARTITION_COLUMN)
    reader = spark.read.format("statestore").option("batchId", str(batch_id)).option("operatorId", str(op.operator_id))
    if sel.store_name:
        reader = reader.option("storeName", sel.store_name)
    if sel.join_side:
        reader = reader.option("joinSide", sel.join_side)
    if sel.state_var == TIMERS:
        reader = reader.option("readRegisteredTimers", "true")
    elif sel.state_var:
        reader = reader.option("stateVarName", sel.state_var)
    return flatten_state(reader.load(checkpoint))


def touch_streams(spark: SparkSession) -> None:
    """Create the context's StateStoreCoordinator (the PySpark 4.1 trap) through `spark`: once
    per SparkContext is enough, and a child session must not do it (each session that
    touches `streams` adds a listener bus to the context for good)."""
    _ = spark.streams.active


def read_metadata(spark: SparkSession, checkpoint: str, batch_id: int) -> StateMetadata:
    """Spark's `state-metadata` source on a checkpoint: operators, stores, partitions, batches.
    `spark`'s context must have its StateStoreCoordinator (`touch_streams`)."""
    rows = spark.read.format("state-metadata").load(checkpoint).collect()
    stores = sorted(
        (
            StoreMetadata(int(r.operatorId), str(r.operatorName), str(r.stateStoreName), int(r.numPartitions),
                          int(r.minBatchId), int(r.maxBatchId), _variables(r.asDict().get("operatorProperties")))
            for r in rows
        ),
        key=lambda s: (s.operator_id, s.store_name),
    )
    return StateMetadata(batch_id, stores)


def _variables(properties: str | None) -> tuple[tuple[str, str], ...]:
    """(name, kind) of the state variables in the `operatorProperties` Spark's state-metadata
    source gives for a transformWithState operator (empty for any other)."""
    import json

    try:
        return tuple((v.name, v.kind) for v in state_variables_of(json.loads(properties or "{}")))
    except (ValueError, KeyError, TypeError, AttributeError):
        return ()


def _checkpoint_operators(meta: StateMetadata) -> list[_OperatorRef]:
    ops: dict[int, _OperatorRef] = {}
    for s in meta.stores:
        prev = ops.get(s.operator_id)
        stores = (*(prev.stores if prev else ()), s.store_name)
        ops[s.operator_id] = _OperatorRef(s.operator_id, s.operator_name, stores, s.state_variables)
    return [ops[k] for k in sorted(ops)]


def checkpoint_state(
    spark: SparkSession, checkpoint: str, *, batch_id: int | None = None, selector: StateSelector | None = None
) -> DataFrame:
    """The flattened state of a live checkpoint at `batch_id` (default: newest committed).

    Reads the checkpoint in place (Spark's reader only reads): for a running stream, name
    a committed batch that its maintenance has not cleaned up yet.
    """

    reader = CheckpointReader(checkpoint)
    batch = reader.resolve_batch(batch_id)
    conf, _ = reader.offsets(batch)
    touch_streams(spark)
    session = spark.newSession()  # the pinned confs go to a child session, never the caller's
    _copy_sql_confs(spark, session)
    _apply_pinned_confs(session, conf.get("conf", {}) if isinstance(conf.get("conf"), dict) else {}, None,
                        reader.checkpoint_format(batch))
    meta = read_metadata(session, str(reader.root), batch)
    sel = selector or StateSelector()
    op = _resolve_operator(_checkpoint_operators(meta), sel, f"checkpoint {checkpoint}")
    _refuse_before_migration(reader, batch, op.operator_id, sel.store_name or "default", checkpoint)
    return _read(session, str(reader.root), batch, op, sel)


def _refuse_before_migration(reader: CheckpointReader, batch: int, op_id: int, store: str, checkpoint: str) -> None:
    """Spark reads a store in its current schema file only: a batch written before a migration
    replaced it (engine/edit/migrate.py) would be decoded in the new schema."""
    rel = schema_file(op_id, store)
    folder = posixpath.dirname(rel)
    names = reader.fs.listdir(folder) if reader.fs.is_dir(folder) else []
    later = migration_after((f"{folder}/{n}" for n in names), batch)
    if later is not None:
        raise UsageError(
            f"batch {batch} of checkpoint {checkpoint} was written before operator {op_id}'s state ({store}) was "
            f"migrated at batch {later[0]}: Spark would read it in the new schema",
            hint="read it from the snapshot taken before the migration, or look keys up without Spark "
                 "(`streamstate state get --checkpoint ... --batch N`, which reads each batch in its own schema)")


@dataclass
class Materialised:
    """A snapshot laid out for reading: its manifest, the checkpoint's location (a local
    directory or a scratch `s3a://` prefix) and the session that reads it."""

    manifest: Manifest
    location: str
    metadata: StateMetadata | None = field(default=None)
    session: Any = field(default=None)  # the child SparkSession with this snapshot's pinned confs


class StateReader:
    """Snapshots' state as DataFrames in one SparkSession; a context manager.

        with StateReader(store) as reader:
            df = reader.state("orders", "latest", StateSelector(operator="stateStoreSave"))
            df.where("value_sum < 0").show()

    Each snapshot is materialised once (the first time it is read) and kept until
    `close()`, which removes every copy; a session the reader started is stopped then too,
    one passed in (or already active in this process) is left running, its confs untouched.
    """

    def __init__(
        self,
        store: SnapshotStore | None = None,
        *,
        spark: SparkSession | None = None,
        workdir: str | Path | None = None,
        parallelism: int = 8,
        shuffle_partitions: int = 2,
        scratch_in_store: str | None = None,
    ) -> None:
        """`store`: where the snapshots live (per call otherwise). `spark`: a session to reuse
        (default: a local one started on first use). `workdir`: where local copies go.
        `scratch_in_store`: a state job's id: materialise into the store's scratch area for
        that job (engine/state/scratch.py) instead of a local temp directory."""
        self.store = store
        self._spark = spark
        self._own_spark = spark is None
        self._workdir = Path(workdir) if workdir else None
        self._root: Path | None = None
        self.parallelism = parallelism
        self.shuffle_partitions = shuffle_partitions
        self.scratch_in_store = scratch_in_store
        self._scratch_stores: dict[str, SnapshotStore] = {}
        self._snapshots: dict[tuple[str, str, str], Materialised] = {}
        self._lock = threading.Lock()
        self.materialised = 0  # how many snapshots were restored (for reports and tests)

    # --- lifecycle -------------------------------------------------------------------

    def __enter__(self) -> StateReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Remove every materialised snapshot; stop the session if this reader started it."""
        from airflow_provider_streamstate.engine.state.scratch import remove_scratch

        with self._lock:
            self._snapshots.clear()
            if self._root is not None:
                shutil.rmtree(self._root, ignore_errors=True)
                self._root = None
            scratch, self._scratch_stores = self._scratch_stores, {}
            if self._own_spark and self._spark is not None:
                self._spark.stop()
                self._spark = None
        for st in scratch.values():
            assert self.scratch_in_store is not None
            try:
                remove_scratch(st, self.scratch_in_store)
            except Exception as exc:  # noqa: BLE001 - the submitter removes it again after the job
                log.warning("could not remove scratch of %s in %s: %s", self.scratch_in_store, st.url, exc)

    @property
    def spark(self) -> SparkSession:
        if self._spark is None:
            require_pyspark("reading state with Spark")
            from pyspark import SparkContext
            from pyspark.sql import SparkSession


            active = SparkSession.getActiveSession()
            if active is None and SparkContext._active_spark_context is not None:  # noqa: SLF001 - no public API
                active = SparkSession.builder.getOrCreate()  # the process's session, from another thread
            if active is not None:  # someone else's session (a notebook, a test): use it, never stop it
                self._spark, self._own_spark = active, False
            else:
                self._spark = spark_session("streamstate-state", shuffle_partitions=self.shuffle_partitions)
        return self._spark

    # --- snapshots -------------------------------------------------------------------

    def _store(self, store: SnapshotStore | None) -> SnapshotStore:
        chosen = store or self.store
        if chosen is None:
            raise UsageError("no snapshot store given", hint="pass store= to StateReader or to the call")
        return chosen

    def materialise(self, stream: str, snapshot: str, *, store: SnapshotStore | None = None) -> Materialised:
        """Lay a snapshot (id, `latest` or `latest-good:<suite>`) out once as a checkpoint:
        in this reader's temp directory, or in the store's scratch area."""
        from airflow_provider_streamstate.engine.state.scratch import materialise_in_store

        st = self._store(store)
        manifest = resolve_snapshot(st, stream, snapshot)
        key = (st.url, stream, manifest.snapshot_id)
        with self._lock:
            if key in self._snapshots:
                return self._snapshots[key]
            index = len(self._snapshots)
            if self.scratch_in_store is None and self._root is None:
                if self._workdir is not None:
                    self._workdir.mkdir(parents=True, exist_ok=True)
                self._root = Path(tempfile.mkdtemp(prefix="streamstate-state-", dir=self._workdir))
            if self.scratch_in_store is not None:
                self._scratch_stores[st.url] = st
        if self.scratch_in_store is not None:
            location = materialise_in_store(st, manifest, self.scratch_in_store, index, parallelism=self.parallelism)
        else:
            assert self._root is not None
            target = self._root / f"{index:04d}-{manifest.snapshot_id}"
            # A clone: nothing is recorded in the store, no timeline starts; fsync buys nothing
            # for a copy that is deleted when the reader closes.
            restore_snapshot(st, stream, manifest.snapshot_id, target, new_query_id=True, fsync=False,
                             parallelism=self.parallelism)
            location = str(target)
        mat = Materialised(manifest, location)
        with self._lock:
            self.materialised += 1
            self._snapshots[key] = mat
        log.info("materialised %s of %s at %s", manifest.snapshot_id, stream, location)
        return mat

    def _session(self, mat: Materialised) -> SparkSession:
        """The child session that reads `mat`, with the confs its checkpoint pinned."""
        if mat.session is None:
            require_state_reader(str(self.spark.version))
            touch_streams(self.spark)
            session = self.spark.newSession()
            _copy_sql_confs(self.spark, session)
            _apply_pinned_confs(session, mat.manifest.spark_conf, mat.manifest.state_store,
                                mat.manifest.checkpoint_format)
            mat.session = session
        return mat.session  # type: ignore[no-any-return]

    def metadata(self, stream: str, snapshot: str, *, store: SnapshotStore | None = None) -> StateMetadata:
        """Operators, stores, partitions and batch range of a snapshot's state."""
        mat = self.materialise(stream, snapshot, store=store)
        if mat.metadata is None:
            if not mat.manifest.operators:
                mat.metadata = StateMetadata(mat.manifest.batch_id, [])
            else:
                mat.metadata = read_metadata(self._session(mat), mat.location, mat.manifest.batch_id)
        return mat.metadata

    def state(
        self, stream: str, snapshot: str, selector: StateSelector | None = None, *, store: SnapshotStore | None = None
    ) -> DataFrame:
        """One operator's state of a snapshot, flattened (see the module docstring)."""
        sel = selector or StateSelector()
        mat = self.materialise(stream, snapshot, store=store)
        m = mat.manifest
        op = _resolve_operator(_manifest_operators(m), sel, f"snapshot {m.snapshot_id} of {stream}")
        return _read(self._session(mat), mat.location, m.batch_id, op, sel)

    def manifest(self, stream: str, snapshot: str, *, store: SnapshotStore | None = None) -> Manifest:
        return resolve_snapshot(self._store(store), stream, snapshot)
