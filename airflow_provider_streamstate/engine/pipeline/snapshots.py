"""Pipeline snapshots: one snapshot per member at the cut's batches, the links' channel
records, and a write-once record naming them all, written last, so a pipeline snapshot
exists only once every member's does (a failure in between leaves member snapshots, which
are ordinary snapshots of their streams, and no pipeline snapshot).

Layout in the store: `pipelines/<name>/snapshots/<id>.json` and
`pipelines/<name>/channels/<id>/<topic>.json`; `<id>` is the UTC time of the cut. Each
member snapshot is pinned (`streams/<s>/pins/<id>.json`, the reason naming the pipeline
snapshot), so a stream's retention never breaks a pipeline snapshot; pipeline retention
deletes the pipeline snapshot first and then releases the pins.
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from airflow_provider_streamstate.engine.catalog.retention import pin_snapshot
from airflow_provider_streamstate.engine.catalog.snapshots import get_snapshot
from airflow_provider_streamstate.engine.catalog.validation_records import validation_status
from airflow_provider_streamstate.engine.core.errors import NotFoundError, UnsafeManifestError, UsageError
from airflow_provider_streamstate.engine.core.manifest import validate_snapshot_id, validate_stream_name
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.pipeline import channel as channel_mod
from airflow_provider_streamstate.engine.pipeline.cut import DEFAULT_WAIT_S, ChannelRange, find_cut
from airflow_provider_streamstate.engine.pipeline.spec import PipelineSpec
from airflow_provider_streamstate.engine.stores.base import SnapshotStore

log = logging.getLogger("streamstate.pipeline")

FORMAT = "streamstate.pipeline-snapshot/1"
PIPELINE_SNAPSHOT_ID_RE = re.compile(r"^\d{8}T\d{12}Z$")
LATEST_GOOD = "latest-good"


def pin_reason(pipeline: str, snapshot_id: str) -> str:
    """What a member's pin says: the pipeline snapshot that needs it."""
    return f"member of pipeline snapshot {pipeline}/{snapshot_id}"


def _snapshots_prefix(pipeline: str) -> str:
    return f"pipelines/{validate_stream_name(pipeline)}/snapshots/"


def _channel_key(pipeline: str, snapshot_id: str, topic: str) -> str:
    return f"pipelines/{pipeline}/channels/{snapshot_id}/{topic}.json"


@dataclass(frozen=True)
class MemberSnapshot:
    stream: str
    snapshot_id: str
    batch_id: int
    reads: dict[str, dict[str, int]]
    produced: dict[str, dict[str, int]]

    def to_json(self) -> dict[str, Any]:
        return {"snapshot_id": self.snapshot_id, "batch_id": self.batch_id, "reads": self.reads,
                "produced": self.produced}


@dataclass(frozen=True)
class StoredChannel:
    range: ChannelRange
    records: int
    sha256: str
    key: str  # of the channel's records in the store

    def to_json(self) -> dict[str, Any]:
        return {**self.range.to_json(), "records": self.records, "sha256": self.sha256, "key": self.key}


@dataclass(frozen=True)
class PipelineSnapshot:
    pipeline: str
    snapshot_id: str
    created_at: str
    spec: PipelineSpec
    members: dict[str, MemberSnapshot]
    channels: list[StoredChannel]
    cut_seconds: float

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "pipeline": self.pipeline, "snapshot_id": self.snapshot_id,
                "created_at": self.created_at, "spec": self.spec.to_json(),
                "members": {s: m.to_json() for s, m in sorted(self.members.items())},
                "channels": [c.to_json() for c in self.channels], "cut_seconds": round(self.cut_seconds, 3)}

    @classmethod
    def from_json(cls, d: Any, where: str) -> PipelineSnapshot:
        def offsets(v: Any, what: str) -> dict[str, dict[str, int]]:
            if not isinstance(v, dict) or not all(
                    isinstance(t, str) and isinstance(ps, dict) and all(
                        isinstance(p, str) and p.isdigit() and isinstance(o, int) and not isinstance(o, bool) and o >= 0
                        for p, o in ps.items()) for t, ps in v.items()):
                raise UnsafeManifestError(f"{where}: {what} is not topic -> partition -> offset")
            return v

        try:
            if not isinstance(d, dict) or d.get("format") != FORMAT:
                raise UnsafeManifestError(f"{where} is not a pipeline snapshot ({FORMAT})")
            spec = PipelineSpec.from_json(d["spec"], where)
            if d["pipeline"] != spec.name or not PIPELINE_SNAPSHOT_ID_RE.match(str(d["snapshot_id"])):
                raise UnsafeManifestError(f"{where}: pipeline or snapshot id do not match the record")
            members = {}
            for s, m in d["members"].items():
                if s not in spec.members:
                    raise UnsafeManifestError(f"{where}: member {s} is not in the pipeline's spec")
                members[s] = MemberSnapshot(s, validate_snapshot_id(m["snapshot_id"]), int(m["batch_id"]),
                                            offsets(m["reads"], f"{s} reads"), offsets(m["produced"], f"{s} produced"))
            if set(members) != set(spec.members):
                raise UnsafeManifestError(f"{where}: members do not match the pipeline's spec")
            channels = []
            links = {link.topic: link for link in spec.links}
            if sorted(str(c["topic"]) for c in d["channels"]) != sorted(links):
                raise UnsafeManifestError(f"{where}: its channels are not one per link of its spec")
            for c in d["channels"]:
                start, end = offsets({"x": c["start"]}, "channel start")["x"], offsets({"x": c["end"]}, "channel end")["x"]
                link = links[str(c["topic"])]
                if (str(c["upstream"]), str(c["downstream"])) != (link.upstream, link.downstream) or set(start) != set(end) \
                        or any(start[p] > end[p] for p in end):
                    raise UnsafeManifestError(f"{where}: channel {link.topic} does not match its link or its ranges")
                key = str(c["key"])
                if key != _channel_key(spec.name, d["snapshot_id"], str(c["topic"])):
                    raise UnsafeManifestError(f"{where}: channel key {key!r} is not this snapshot's")
                channels.append(StoredChannel(ChannelRange(str(c["topic"]), str(c["upstream"]), str(c["downstream"]),
                                                           start, end), int(c["records"]), str(c["sha256"]), key))
            return cls(spec.name, d["snapshot_id"], str(d["created_at"]), spec, members, channels,
                       float(d["cut_seconds"]))
        except (KeyError, TypeError, ValueError, AttributeError, UsageError) as exc:
            if isinstance(exc, UnsafeManifestError):
                raise
            raise UnsafeManifestError(f"{where} is not a valid pipeline snapshot: {exc}") from None

    def channel_records(self, store: SnapshotStore, c: StoredChannel) -> list[channel_mod.ChannelRecord]:
        """The channel's records, checked against the count and sha256 recorded with them."""
        data = store.get_record(c.key)
        if data is None:
            raise NotFoundError(f"channel records {c.key} of pipeline snapshot {self.snapshot_id} are missing",
                                hint="this pipeline snapshot cannot be restored; choose another")
        if channel_mod.digest(data) != c.sha256:
            raise UnsafeManifestError(f"channel records {c.key} do not match their sha256 (damaged)")
        records = channel_mod.decode(data, c.key)
        if len(records) != c.records:
            raise UnsafeManifestError(f"{c.key} holds {len(records)} records, the snapshot says {c.records}")
        return records


@dataclass(frozen=True)
class PipelineSnapshotResult:
    snapshot: PipelineSnapshot
    member_results: dict[str, Any]  # stream -> SnapshotResult
    seconds: float
    phases: dict[str, float]  # seconds: cut (incl. the wait between batches), members, channels, record

    def to_json(self) -> dict[str, Any]:
        s = self.snapshot
        return {"pipeline": s.pipeline, "snapshot_id": s.snapshot_id,
                "members": {k: {**m.to_json(), "reused": self.member_results[k].reused}
                            for k, m in sorted(s.members.items())},
                "channels": [{"topic": c.range.topic, "records": c.records} for c in s.channels],
                "cut_seconds": round(s.cut_seconds, 3), "seconds": round(self.seconds, 3),
                "phases": {k: round(v, 3) for k, v in self.phases.items()}}


def create_pipeline_snapshot(
    spec: PipelineSpec, store: SnapshotStore, kafka_bootstrap: str, *, kafka_config: dict[str, Any] | None = None,
    checkpoint_connection: Any = None, wait_s: float = DEFAULT_WAIT_S, parallelism: int = 8,
    labels: dict[str, str] | None = None,
) -> PipelineSnapshotResult:
    """Take a consistent cut of the running pipeline and snapshot it: every member at its
    batch (with Kafka anchors), every link's channel records, then the pipeline record."""
    started = time.monotonic()
    cut = find_cut(spec, kafka_bootstrap, kafka_config=kafka_config, connection=checkpoint_connection, wait_s=wait_s)
    now = datetime.now(UTC)
    snapshot_id = now.strftime("%Y%m%dT%H%M%S%fZ")
    phases = {"cut": time.monotonic() - started}
    t0 = time.monotonic()
    results: dict[str, Any] = {}
    for stream in spec.order():  # upstream first: its batch is the newest, its files the likeliest to go
        results[stream] = create_snapshot(
            spec.members[stream], store, stream, batch_id=cut.members[stream].batch_id,
            labels={**(labels or {}), "pipeline": spec.name, "pipeline-snapshot": snapshot_id}, always=True,
            parallelism=parallelism, kafka_bootstrap=kafka_bootstrap, kafka_config=kafka_config,
            checkpoint_connection=checkpoint_connection)
    phases["members"] = time.monotonic() - t0
    t0 = time.monotonic()
    channels = [(rng, channel_mod.read_channel(rng, kafka_bootstrap, kafka_config=kafka_config)) for rng in cut.channels]
    phases["channels"] = time.monotonic() - t0
    t0 = time.monotonic()
    members = {s: MemberSnapshot(s, results[s].manifest.snapshot_id, cut.members[s].batch_id, cut.members[s].reads,
                                 cut.members[s].produced) for s in spec.order()}
    snap = record_pipeline_snapshot(store, spec, snapshot_id, now.isoformat(), members, channels, cut.seconds)
    phases["record"] = time.monotonic() - t0
    return PipelineSnapshotResult(snap, results, time.monotonic() - started, phases)


def record_pipeline_snapshot(
    store: SnapshotStore, spec: PipelineSpec, snapshot_id: str, created_at: str, members: dict[str, MemberSnapshot],
    channels: list[tuple[ChannelRange, list[channel_mod.ChannelRecord]]], cut_seconds: float,
) -> PipelineSnapshot:
    """Publish a pipeline snapshot whose member snapshots exist: pin them, store the channel
    records, then write the record (last: until then there is no pipeline snapshot)."""
    for m in members.values():  # stream retention keeps a live pipeline snapshot's members (pipeline/retention.py)
        pin_snapshot(store, m.stream, m.snapshot_id, reason=pin_reason(spec.name, snapshot_id))
    stored = []
    for rng, records in channels:
        data = channel_mod.encode(records)
        key = _channel_key(spec.name, snapshot_id, rng.topic)
        store.put_record(key, data)
        stored.append(StoredChannel(rng, len(records), channel_mod.digest(data), key))
    snap = PipelineSnapshot(spec.name, snapshot_id, created_at, spec, members, stored, cut_seconds)
    store.put_record(f"{_snapshots_prefix(spec.name)}{snapshot_id}.json",
                     json.dumps(snap.to_json(), indent=1, sort_keys=True).encode())
    log.info("pipeline snapshot %s of %s: %s", snapshot_id, spec.name,
             ", ".join(f"{m.stream}={m.snapshot_id}" for m in members.values()))
    return snap


def member_validations(store: SnapshotStore, snap: PipelineSnapshot) -> dict[str, dict[str, bool | None]]:
    """Per member, {suite: success} of the validations recorded for its snapshot (None: a
    damaged record, never a pass)."""
    return {s: validation_status(store, s, [m.snapshot_id]).get(m.snapshot_id, {}) for s, m in snap.members.items()}


def known_good(validations: dict[str, dict[str, bool | None]]) -> bool:
    """Every member validated, and every recorded validation passed."""
    return all(v and all(ok is True for ok in v.values()) for v in validations.values())


def list_pipeline_snapshots(store: SnapshotStore, pipeline: str) -> list[str]:
    """Ids of the pipeline's snapshots, oldest first."""
    prefix = _snapshots_prefix(pipeline)
    return sorted(k[len(prefix):-len(".json")] for k in store.list_records(prefix)
                  if k.endswith(".json") and PIPELINE_SNAPSHOT_ID_RE.match(k[len(prefix):-len(".json")]))


def get_pipeline_snapshot(store: SnapshotStore, pipeline: str, snapshot_id: str, *,
                          check_members: bool = True) -> PipelineSnapshot:
    """A pipeline snapshot by id, `latest`, or `latest-good` (the newest whose every member
    passed all its recorded validations), its members' manifests checked to exist (unless
    `check_members` is False: retention deleting it needs only the record)."""
    if snapshot_id == LATEST_GOOD:
        for sid in reversed(list_pipeline_snapshots(store, pipeline)):
            snap = get_pipeline_snapshot(store, pipeline, sid, check_members=check_members)
            if known_good(member_validations(store, snap)):
                return snap
        raise NotFoundError(f"pipeline {pipeline} has no snapshot whose every member passed its validations",
                            hint="validate one with `streamstate pipeline validate`")
    if snapshot_id == "latest":
        ids = list_pipeline_snapshots(store, pipeline)
        if not ids:
            raise NotFoundError(f"pipeline {pipeline} has no snapshot in {store.url}",
                                hint="take one with `streamstate snapshot create --pipeline SPEC`")
        snapshot_id = ids[-1]
    if not PIPELINE_SNAPSHOT_ID_RE.match(snapshot_id):
        raise UsageError(f"invalid pipeline snapshot id {snapshot_id!r}",
                         hint="pipeline snapshot ids look like 20261125T101500123456Z; see `streamstate pipeline list`")
    key = f"{_snapshots_prefix(pipeline)}{snapshot_id}.json"
    data = store.get_record(key)
    if data is None:
        raise NotFoundError(f"pipeline {pipeline} has no snapshot {snapshot_id} in {store.url}",
                            hint="list them with `streamstate pipeline list`")
    try:
        snap = PipelineSnapshot.from_json(json.loads(data), key)
    except ValueError as exc:
        raise UnsafeManifestError(f"{key} is not JSON: {exc}") from None
    for m in snap.members.values() if check_members else ():
        get_snapshot(store, m.stream, m.snapshot_id)  # NotFoundError when a hand took it
    return snap
