"""Restoring a pipeline snapshot, in place or as a clone, so that no link record is lost or
counted twice.

The upstream, restored at its cut, produces again everything it produced after the cut
(Spark's Kafka sink is at-least-once), and those records are already in the link topic
beyond the cut's produced offsets. Kafka cannot delete a middle range, and Spark reads a
partition as one contiguous range, so the downstream cannot skip them where they are.
Instead the channel records are appended to the link topic after everything in it, and the
downstream's restored checkpoint resumes exactly there: it reads the channel, then what the
restored upstream produces. The records in between are never read again.

A clone does the same onto new link topics (one per link, created with the original's
partition count): the channel becomes their first records, the downstream's offsets are
rewritten to the new topic, and each member is restored with a new query id into its own
checkpoint and recorded as a clone (its link topics deleted on expiry). The clone's upstream
must write to the new topic: that is its application's configuration, given when it starts.

Every member must be stopped: before anything is written to Kafka, each in-place target is
refused while the heartbeat streamstate keeps beside it says running (a query started
without streamstate keeps none: stop it first), and each clone target must be empty; a link
topic whose partitions changed since the cut is refused (Spark would read a new partition
from its start). Kafka writes come before the checkpoints: a failure after the channel was appended leaves those records
in the topic, read by no restored checkpoint (the restore can be run again; a downstream
restarted from its old checkpoint instead would read them).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_streamstate.engine.catalog.snapshots import get_snapshot
from airflow_provider_streamstate.engine.checkpoint.filesystems import S3CheckpointFS, is_s3_location
from airflow_provider_streamstate.engine.checkpoint.liveness import assert_not_running
from airflow_provider_streamstate.engine.checkpoint.offset_rewrite import OffsetRewrite
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.checkpoint.sidecar import S3Sidecar, local_root
from airflow_provider_streamstate.engine.core.errors import (
    NotFoundError,
    TransientError,
    UnsafeManifestError,
    UsageError,
)
from airflow_provider_streamstate.engine.kafka.offsets import admin_client, list_offsets
from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.pipeline import channel as channel_mod
from airflow_provider_streamstate.engine.pipeline.snapshots import PipelineSnapshot
from airflow_provider_streamstate.engine.stores import s3_client_from_env
from airflow_provider_streamstate.engine.stores.base import SnapshotStore
from airflow_provider_streamstate.engine.streams.clones import record_clone

log = logging.getLogger("streamstate.pipeline")


@dataclass(frozen=True)
class PipelineClone:
    """Where each member's clone goes and what it is called, and the new link topics."""

    names: dict[str, str]  # member stream -> clone stream name
    checkpoints: dict[str, str]  # member stream -> the clone's checkpoint location
    topics: dict[str, str]  # link topic -> the clone's topic
    expires_at: str | None = None  # recorded as clones (TTL) when given
    kafka_conn_id: str | None = None


@dataclass(frozen=True)
class PipelineRestoreResult:
    pipeline: str
    snapshot_id: str
    checkpoints: dict[str, str]  # stream (or clone) -> checkpoint written
    resume: dict[str, dict[str, int]]  # link topic (clone's) -> partition -> where the downstream resumes
    channel_records: dict[str, int]  # link topic (clone's) -> records appended
    seconds: float
    topics: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"pipeline": self.pipeline, "snapshot_id": self.snapshot_id, "checkpoints": self.checkpoints,
                "resume": self.resume, "channel_records": self.channel_records, "topics": self.topics,
                "seconds": round(self.seconds, 3)}


def _ends(bootstrap: str, topic: str, partitions: list[str], kafka_config: dict[str, Any] | None) -> dict[str, int]:
    return list_offsets(admin_client(bootstrap, kafka_config), {topic: [int(p) for p in partitions]})[topic]


def _create_topic(bootstrap: str, topic: str, partitions: int, kafka_config: dict[str, Any] | None) -> None:
    """Create `topic` with the link's partition count at the cut; an existing empty one with
    that count is accepted."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic

    admin = admin_client(bootstrap, kafka_config)
    try:
        topics = admin.list_topics(timeout=10).topics
        if topic in topics:
            parts = [str(p) for p in topics[topic].partitions]
            if any(_ends(bootstrap, topic, parts, kafka_config).values()):
                raise UsageError(f"clone topic {topic} exists and is not empty",
                                 hint="name a new topic for each link of the clone")
            if len(parts) != partitions:
                raise UsageError(f"clone topic {topic} has {len(parts)} partitions, the link had {partitions}",
                                 hint="let the clone create its topics")
            return
        fut = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=-1)])
        fut[topic].result(timeout=30)
        deadline = time.monotonic() + 30
        while True:  # created, and every partition has a leader that answers
            meta = admin.list_topics(timeout=10).topics.get(topic)
            if meta is not None and meta.partitions and all(pm.leader >= 0 for pm in meta.partitions.values()):
                try:
                    _ends(bootstrap, topic, [str(p) for p in meta.partitions], kafka_config)
                    return
                except TransientError:
                    pass
            if time.monotonic() > deadline:
                raise TransientError(f"topic {topic} was not ready 30 s after its creation",
                                     hint="check the brokers, then retry")
            time.sleep(0.2)
    except KafkaException as exc:
        raise TransientError(f"cannot create the clone topic {topic} at {bootstrap}: {exc}",
                             hint="check the brokers and the connection's rights to create topics") from None


def _partitions(bootstrap: str, topic: str, kafka_config: dict[str, Any] | None) -> set[str]:
    from confluent_kafka import KafkaException

    try:
        meta = admin_client(bootstrap, kafka_config).list_topics(timeout=10).topics.get(topic)
    except KafkaException as exc:
        raise TransientError(f"cannot reach Kafka at {bootstrap}: {exc}", hint="check the brokers, then retry") from None
    if meta is None or meta.error is not None:
        raise NotFoundError(f"link topic {topic} does not exist at {bootstrap}",
                            hint="check --kafka-bootstrap: the restore appends the channel to the link topic")
    return {str(p) for p in meta.partitions}


def _check_target(target: str, *, in_place: bool, store: SnapshotStore, s3_client: Any) -> None:
    """Before anything is written to Kafka: an in-place target's stream must not be running
    (by the heartbeat streamstate keeps beside it), and a clone's target must be empty."""
    if is_s3_location(target):
        client = s3_client or getattr(store, "client", None) or s3_client_from_env()
        fs = S3CheckpointFS(target, client)
        if in_place:
            assert_not_running(S3Sidecar(fs), "restore the pipeline over it")
        elif fs.listdir(""):
            raise UsageError(f"clone target {fs.location} is not empty", hint="give each member's clone a new location")
        return
    path = local_root(target, refusal=(f"cannot restore into {target}",
                                       "give a local path, a file:// URI or an s3a://bucket/path"))
    if in_place:
        if path.exists():
            assert_not_running(path, "restore the pipeline over it")
    elif path.exists() and any(path.iterdir()):
        raise UsageError(f"clone target {path} is not empty", hint="give each member's clone a new location")


def _check_resume(target: str, batch_id: int, expected: dict[str, dict[str, int]], store: SnapshotStore,
                  s3_client: Any) -> None:
    """Read the restored downstream's checkpoint back: its batch must resume exactly at the
    appended channel (a source entry the rewrite did not recognise would leave the cut's
    offsets, and the downstream would read the records in between again)."""
    client = (s3_client or getattr(store, "client", None)) if is_s3_location(target) else None
    got = CheckpointReader(target, s3_client=client).kafka_offsets(batch_id)
    wrong = sorted(t for t, parts in expected.items() if got.get(t) != parts)
    if wrong:
        raise UnsafeManifestError(
            f"the restored checkpoint {target} does not resume {', '.join(wrong)} where the channel was appended "
            f"(it names {', '.join(f'{t}={got.get(t)}' for t in wrong)})",
            hint="its Kafka source entry was not rewritten; restore it again, or report the checkpoint's offsets file")


def restore_pipeline(
    store: SnapshotStore, snap: PipelineSnapshot, kafka_bootstrap: str, *, clone: PipelineClone | None = None,
    kafka_config: dict[str, Any] | None = None, s3_client: Any = None, parallelism: int = 8,
) -> PipelineRestoreResult:
    """Restore every member of `snap` (into its own checkpoint, replacing it, or as `clone`)
    and move each link's channel so the downstream resumes exactly at it."""
    started = time.monotonic()
    spec = snap.spec
    if clone is not None:
        for what, given, want in (("names", set(clone.names), set(spec.members)),
                                  ("checkpoints", set(clone.checkpoints), set(spec.members)),
                                  ("topics", set(clone.topics), {c.range.topic for c in snap.channels})):
            if given != want:
                raise UsageError(f"the clone of pipeline {spec.name} gives {what} for {', '.join(sorted(given)) or 'none'}",
                                 hint=f"give one for each of {', '.join(sorted(want))}")
    manifests = {s: get_snapshot(store, s, m.snapshot_id) for s, m in snap.members.items()}
    records = {c.range.topic: snap.channel_records(store, c) for c in snap.channels}  # all checked before any write
    for stream in spec.order():
        _check_target(spec.members[stream] if clone is None else clone.checkpoints[stream], in_place=clone is None,
                      store=store, s3_client=s3_client)
    if clone is None:  # a partition added since the cut would be read from its start: refused
        for c in snap.channels:
            now = _partitions(kafka_bootstrap, c.range.topic, kafka_config)
            if now != set(c.range.end):
                raise UsageError(f"link topic {c.range.topic} has partitions {sorted(now, key=int)}, the cut saw "
                                 f"{sorted(c.range.end, key=int)}",
                                 hint="restore a pipeline snapshot taken after the partitions were added")
    resume: dict[str, dict[str, int]] = {}
    appended: dict[str, int] = {}
    for c in snap.channels:
        topic = c.range.topic if clone is None else clone.topics[c.range.topic]
        if clone is not None:
            _create_topic(kafka_bootstrap, topic, len(c.range.end), kafka_config)
        parts = sorted(c.range.end, key=int)
        before = _ends(kafka_bootstrap, topic, parts, kafka_config)
        channel_mod.append_channel(records[c.range.topic], topic, kafka_bootstrap, kafka_config=kafka_config)
        after = _ends(kafka_bootstrap, topic, parts, kafka_config)
        wrote = {p: sum(1 for r in records[c.range.topic] if str(r.partition) == p) for p in parts}
        if any(after[p] - before[p] != wrote[p] for p in parts):
            raise UsageError(f"{topic} grew by {sum(after[p] - before[p] for p in parts)} records while the "
                             f"restore appended {sum(wrote.values())}: something else writes to it",
                             hint="stop every writer of the pipeline's link topics, then restore again")
        resume[topic] = before
        appended[topic] = sum(wrote.values())
    checkpoints: dict[str, str] = {}
    for stream in spec.order():
        m = snap.members[stream]
        names: dict[str, str] = {}
        offsets: dict[str, dict[str, int]] = {}
        for link in spec.incoming(stream):
            new = link.topic if clone is None else clone.topics[link.topic]
            names[link.topic], offsets[new] = new, resume[new]
        for topic, resume_at in manifests[stream].kafka_offsets.items():  # other topics read: as they were
            if topic not in names:
                names[topic], offsets[topic] = topic, dict(resume_at)
        rewrite = OffsetRewrite(names, offsets) if spec.incoming(stream) else None
        target = spec.members[stream] if clone is None else clone.checkpoints[stream]
        restored = restore_snapshot(store, stream, m.snapshot_id, target, force=clone is None, s3_client=s3_client,
                                    new_query_id=clone is not None, parallelism=parallelism, rewrite=rewrite)
        if rewrite is not None:
            _check_resume(restored.target, m.batch_id, {t: offsets[t] for t in names.values() if t in resume},
                          store, s3_client)
        name = stream if clone is None else clone.names[stream]
        checkpoints[name] = restored.target
        if clone is not None and clone.expires_at is not None:
            own = [clone.topics[link.topic] for link in spec.outgoing(stream)]
            record_clone(store, clone=name, source_stream=stream, checkpoint=restored.target, snapshot_id=m.snapshot_id,
                         expires_at=clone.expires_at, sinks={t: t for t in own}, delete_sinks=bool(own),
                         kafka_conn_id=clone.kafka_conn_id)
    log.info("restored pipeline %s at %s%s: %s", spec.name, snap.snapshot_id, " as a clone" if clone else "",
             ", ".join(f"{k}={v}" for k, v in checkpoints.items()))
    return PipelineRestoreResult(spec.name, snap.snapshot_id, checkpoints, resume, appended,
                                 time.monotonic() - started, dict(clone.topics) if clone else {})
