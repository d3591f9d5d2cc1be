"""Which streams and stores the Streams pages show, from Airflow's own records: the Variable
`streamstate_streams` (what the scheduled DAGs use), the streams that recent DAG runs were
given (their `streams` / `stream` conf, with the run's `dr_store`), and the Variable
`streamstate_stores`. A store is only ever opened from this configuration, with its
configured connection: a request can choose among known stores, never name a new one.

Stream specs carry secrets (confs, environment); nothing here returns them: a page gets a
`ConfiguredStream`, which holds names, locations and connection ids only.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_provider_streamstate.engine.core.config.renamed import with_current_names
from airflow_provider_streamstate.engine.core.errors import StreamstateError
from airflow_provider_streamstate.spec import StreamSpec

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from airflow_provider_streamstate.engine.checkpoint.filesystems import CheckpointFS
    from airflow_provider_streamstate.engine.stores.base import SnapshotStore
    from airflow_provider_streamstate.engine.streams.health import BrokerOffsets

log = logging.getLogger("streamstate.ui")

STREAMS_VARIABLE = "streamstate_streams"
STORES_VARIABLE = "streamstate_stores"
RECENT_RUNS = 200  # DAG runs read for the streams they were given
RUNS_SHOWN = 5  # per stream
KAFKA_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class RunRef:
    """A DAG run that handled a stream: the Streams page links to it."""

    dag_id: str
    run_id: str
    state: str | None
    when: str | None

    def to_json(self) -> dict[str, Any]:
        return {"dag_id": self.dag_id, "run_id": self.run_id, "state": self.state, "when": self.when}


@dataclass
class ConfiguredStream:
    """A stream as the pages know it: no secrets, only where it is and how to reach it."""

    name: str
    store: str
    checkpoint: str
    storage_conn_id: str | None = None
    kafka_conn_id: str | None = None
    dr_store: str | None = None
    dr_storage_conn_id: str | None = None
    configured: bool = False  # in the Variable (else only seen in DAG runs)
    runs: list[RunRef] = field(default_factory=list)
    other_stores: list[str] = field(default_factory=list)  # earlier runs gave it another store

    def to_json(self) -> dict[str, Any]:
        return {"stream": self.name, "store": self.store, "checkpoint": self.checkpoint,
                "storage_conn_id": self.storage_conn_id, "kafka_conn_id": self.kafka_conn_id, "dr_store": self.dr_store,
                "dr_storage_conn_id": self.dr_storage_conn_id, "configured": self.configured,
                "runs": [r.to_json() for r in self.runs], "other_stores": self.other_stores}


@dataclass
class Configuration:
    """Every stream and store the pages may show."""

    streams: dict[str, ConfiguredStream]
    stores: dict[str, str | None]  # store URL -> its connection id
    problems: list[str]

    def store_conn(self, url: str) -> str | None:
        return self.stores.get(url)


def _variable(key: str) -> Any:
    from airflow.models.variable import Variable

    try:
        return Variable.get(key, default_var=None, deserialize_json=True)
    except (ValueError, TypeError):
        raise StreamstateError(f"the Variable {key} is not JSON", hint="set it to a JSON list") from None


def _spec(value: Any) -> StreamSpec | None:
    try:
        return StreamSpec.from_value(value)
    except (StreamstateError, TypeError):
        return None


def _conf(run: Any) -> dict[str, Any]:
    conf = run.conf
    if isinstance(conf, str):
        try:
            conf = json.loads(conf)
        except ValueError:
            return {}
    return conf if isinstance(conf, dict) else {}


def load_configuration(session: Session, *, dag_ids: set[str] | None = None) -> Configuration:
    """Streams from the Variable and from the newest DAG runs (of `dag_ids` only, when given:
    the DAGs the user may read), newest first; the first spec seen of a name wins."""
    from airflow.models.dagrun import DagRun
    from sqlalchemy import select

    problems: list[str] = []
    streams: dict[str, ConfiguredStream] = {}
    stores: dict[str, str | None] = {}

    def add(spec: StreamSpec, *, configured: bool, dr_store: str | None = None, dr_conn: str | None = None,
            run: RunRef | None = None) -> None:
        cs = streams.get(spec.name)
        if cs is None:
            cs = streams[spec.name] = ConfiguredStream(
                spec.name, spec.store, spec.checkpoint, spec.storage_conn_id, spec.kafka_conn_id,
                dr_store or None, dr_conn or None, configured)
        elif spec.store != cs.store and spec.store not in cs.other_stores:
            cs.other_stores.append(spec.store)
        if cs.dr_store is None and dr_store and spec.store == cs.store:
            cs.dr_store, cs.dr_storage_conn_id = dr_store, dr_conn or None
        if run is not None and len(cs.runs) < RUNS_SHOWN and run not in cs.runs:
            cs.runs.append(run)
        stores.setdefault(spec.store, spec.storage_conn_id)
        if dr_store:
            stores.setdefault(dr_store, dr_conn or None)

    try:
        listed = _variable(STREAMS_VARIABLE) or []
        for value in listed if isinstance(listed, list) else []:
            spec = _spec(value)
            if spec is None:
                problems.append(f"an entry of the Variable {STREAMS_VARIABLE} is not a valid stream spec")
            else:
                add(spec, configured=True)
        for entry in _variable(STORES_VARIABLE) or []:
            entry = {"store": entry} if isinstance(entry, str) else entry
            try:
                entry = with_current_names(entry, what="a store entry") if isinstance(entry, dict) else entry
            except StreamstateError as exc:  # this entry only: the others are still shown
                problems.append(f"the Variable {STORES_VARIABLE}: {exc.one_line()}")
                continue
            if isinstance(entry, dict) and isinstance(entry.get("store"), str):
                stores.setdefault(entry["store"], entry.get("storage_conn_id"))
    except StreamstateError as exc:
        problems.append(exc.one_line())

    # The columns the pages use, not DagRun objects (up to RECENT_RUNS runs each time the pages
    # read the configuration); a spec given to many runs is checked once.
    query = (select(DagRun.dag_id, DagRun.run_id, DagRun.state, DagRun.run_after, DagRun.start_date,
                    DagRun.queued_at, DagRun.conf).order_by(DagRun.id.desc()).limit(RECENT_RUNS))
    if dag_ids is not None:
        query = query.where(DagRun.dag_id.in_(dag_ids))
    specs: dict[str, StreamSpec | None] = {}

    def spec_of(value: Any) -> StreamSpec | None:
        try:
            key = json.dumps(value, sort_keys=True, default=str)
        except (TypeError, ValueError):
            return _spec(value)
        if key not in specs:
            specs[key] = _spec(value)
        return specs[key]

    for run in session.execute(query):
        conf = _conf(run)
        when = run.run_after or run.start_date or run.queued_at
        ref = RunRef(run.dag_id, run.run_id, str(run.state) if run.state else None,
                     when.isoformat() if when else None)
        streams_conf, one = conf.get("streams"), conf.get("stream")
        given: list[Any] = list(streams_conf) if isinstance(streams_conf, list) else []
        if isinstance(one, dict):
            given.append(one)
        dr_store = conf.get("dr_store") if isinstance(conf.get("dr_store"), str) else None
        dr_conn = next((c for c in (conf.get("dr_storage_conn_id"), conf.get("dr_aws_conn_id"))  # its old name
                        if isinstance(c, str) and c), None)
        for value in given:
            spec = spec_of(value)
            if spec is not None:
                add(spec, configured=False, dr_store=dr_store, dr_conn=dr_conn, run=ref)
        if not given and run.dag_id.startswith("streamstate_") and "pipeline" not in run.dag_id:
            # a scheduled run of a stream DAG: the Variable's streams (a pipeline DAG's run is not theirs)
            for cs in streams.values():
                if cs.configured and len(cs.runs) < RUNS_SHOWN:
                    cs.runs.append(ref)
    return Configuration(dict(sorted(streams.items())), stores, problems)


MAX_STORES = 64  # configured stores kept open in the UI's process, the most recently used
_STORES: dict[tuple[str, str | None], SnapshotStore] = {}
_LOCK = threading.Lock()


def open_configured_store(url: str, storage_conn_id: str | None) -> SnapshotStore:
    """The store, opened once per process per (URL, connection): a page opens the stores it
    shows again and again, and a store holds only a client. Two connections to one URL are
    two stores; the cache keeps the MAX_STORES most recently used."""
    from airflow_provider_streamstate.hooks.store import StreamstateStoreHook

    key = (url, storage_conn_id)
    with _LOCK:
        store = _STORES.pop(key, None)
        if store is not None:
            _STORES[key] = store  # the most recently used last
    if store is None:
        store = StreamstateStoreHook(url, storage_conn_id=storage_conn_id).store
        with _LOCK:
            _STORES[key] = store
            while len(_STORES) > MAX_STORES:
                _STORES.pop(next(iter(_STORES)))
    return store


def checkpoint_of(stream: ConfiguredStream) -> CheckpointFS | None:
    """The stream's checkpoint, opened with its connection (None when none is configured)."""
    from airflow_provider_streamstate.hooks.store import open_checkpoint

    return open_checkpoint(stream.checkpoint, stream.storage_conn_id) if stream.checkpoint else None


def broker_offsets_of(stream: ConfiguredStream) -> BrokerOffsets | None:
    """The stream's Kafka cluster through its `kafka` connection (None when it names none)."""
    if not stream.kafka_conn_id:
        return None
    from airflow_provider_streamstate.hooks.kafka import StreamKafkaHook

    hook = StreamKafkaHook(kafka_config_id=stream.kafka_conn_id)

    def offsets(recorded: dict[str, dict[str, int]]) -> Any:
        return hook.broker_offsets(recorded, timeout_s=KAFKA_TIMEOUT_S)
    return offsets
