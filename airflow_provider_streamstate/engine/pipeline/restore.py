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
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow_provider_streamstate.engine.catalog.snapshots import get_snapshot
from airflow_provider_streamstate.engine.checkpoint.liveness import assert_not_running
from airflow_provider_streamstate.engine.checkpoint.offset_rewrite import OffsetRewrite
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.checkpoint.sidecar import Sidecar
from airflow_provider_streamstate.engine.core.errors import (
    StreamstateError,
    UnsafeManifestError,
    UsageError,
)
from airflow_provider_streamstate.engine.lifecycle.restore import open_target, restore_snapshot
from airflow_provider_streamstate.engine.pipeline.link_topics import LinkTopics
from airflow_provider_streamstate.engine.pipeline.snapshots import PipelineSnapshot
from airflow_provider_streamstate.engine.stores.base import SnapshotStore
from airflow_provider_streamstate.engine.streams.clones import CloneLabel, record_clone, write_clone_label

log = logging.getLogger("streamstate.pipeline")


@dataclass(frozen=True)
class PipelineClone:
    """Where each member's clone goes and what it is called, and the new link topics."""

    names: dict[str, str]  # member stream -> clone stream name
    checkpoints: dict[str, str]  # member stream -> the clone's checkpoint location
    topics: dict[str, str]  # link topic -> the clone's topic
    expires_at: str | None = None  # recorded as clones (TTL) when given
    kafka_conn_id: str | None = None

    @classmethod
    def with_suffix(cls, snap: PipelineSnapshot, suffix: str, checkpoints: Mapping[str, str], *,
                    topics: Mapping[str, str] | None = None, ttl_s: float | None = None,
                    kafka_conn_id: str | None = None) -> PipelineClone:
        """The naming rule of a pipeline clone: members `<member>-<suffix>`, link topics
        `<link>-<suffix>` unless `topics` names them; recorded as clones expiring after
        `ttl_s` (expiry then deletes them and their topics, on `kafka_conn_id`'s cluster)."""
        new_topics = {c.range.topic: f"{c.range.topic}-{suffix}" for c in snap.channels}
        new_topics.update(topics or {})
        expires = None if not ttl_s else (datetime.now(UTC) + timedelta(seconds=float(ttl_s))).isoformat()
        return cls({s: f"{s}-{suffix}" for s in snap.members}, dict(checkpoints), new_topics, expires_at=expires,
                   kafka_conn_id=kafka_conn_id)


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


def check_target(target: str, *, in_place: bool, store: SnapshotStore, connection: Any,
                 role: str = "clone target") -> None:
    """Before anything is written to Kafka: an in-place target's stream must not be running
    (by the heartbeat streamstate keeps beside it), and a clone's target must be empty."""
    fs = open_target(target, store, connection)
    if in_place:
        if fs.exists():
            assert_not_running(Sidecar(fs), "restore the pipeline over it")
    elif fs.exists() and (fs.local_path is not None and not fs.local_path.is_dir() or fs.files()):
        raise UsageError(f"{role} {fs.location} is not empty", hint="give each member a new or empty location")


class PipelineRestoreIncomplete(StreamstateError):
    """A pipeline restore that stopped after appending the channels: some members restored,
    the others not; only running the same restore again makes the pipeline consistent."""


def _incomplete(exc: Exception, snap: PipelineSnapshot, appended: dict[str, int], done: list[str],
                clone: PipelineClone | None) -> PipelineRestoreIncomplete:
    pending = [s if clone is None else clone.names[s] for s in snap.spec.order()
               if (s if clone is None else clone.names[s]) not in done]
    channels = ", ".join(f"{n} to {t}" for t, n in appended.items())
    err = PipelineRestoreIncomplete(
        f"the {'clone' if clone else 'restore'} of pipeline {snap.pipeline} at {snap.snapshot_id} stopped after "
        f"appending its channel records ({channels}) and restoring {', '.join(done) or 'no member'}: "
        + (exc.message if isinstance(exc, StreamstateError) else f"{type(exc).__name__}: {exc}"),
        hint=f"run the same {'clone into new locations and topics' if clone else 'restore'} again once that is fixed; "
             f"do not start {', '.join(pending)} before it succeeds"
             + ("" if clone else " (from its old checkpoint it would read the appended records again)"))
    err.retryable = exc.retryable if isinstance(exc, StreamstateError) else isinstance(exc, OSError)
    return err


def check_resume(target: str, batch_id: int, expected: dict[str, dict[str, int]], store: SnapshotStore,
                  connection: Any) -> None:
    """Read the restored downstream's checkpoint back: its batch must resume exactly at the
    appended channel (a source entry the rewrite did not recognise would leave the cut's
    offsets, and the downstream would read the records in between again)."""
    got = CheckpointReader(open_target(target, store, connection)).kafka_offsets(batch_id)
    wrong = sorted(t for t, parts in expected.items() if got.get(t) != parts)
    if wrong:
        raise UnsafeManifestError(
            f"the restored checkpoint {target} does not resume {', '.join(wrong)} where the channel was appended "
            f"(it names {', '.join(f'{t}={got.get(t)}' for t in wrong)})",
            hint="its Kafka source entry was not rewritten; restore it again, or report the checkpoint's offsets file")


def restore_pipeline(
    store: SnapshotStore, snap: PipelineSnapshot, kafka_bootstrap: str, *, clone: PipelineClone | None = None,
    kafka_config: dict[str, Any] | None = None, connection: Any = None, parallelism: int = 8,
) -> PipelineRestoreResult:
    """Restore every member of `snap` (into its own checkpoint, replacing it, or as `clone`)
    and move each link's channel so the downstream resumes exactly at it. Remote targets
    are reached through `connection` (see `lifecycle.restore.open_target`)."""
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
        check_target(spec.members[stream] if clone is None else clone.checkpoints[stream], in_place=clone is None,
                      store=store, connection=connection)
    kafka = LinkTopics(kafka_bootstrap, kafka_config)
    if clone is None:  # a partition added since the cut would be read from its start: refused
        for c in snap.channels:
            now = kafka.existing(c.range.topic, why="check the Kafka cluster given (the link topics' own): the "
                                                    "restore appends the channel to the link topic")
            if now != set(c.range.end):
                raise UsageError(f"link topic {c.range.topic} has partitions {sorted(now, key=int)}, the cut saw "
                                 f"{sorted(c.range.end, key=int)}",
                                 hint="restore a pipeline snapshot taken after the partitions were added")
    resume: dict[str, dict[str, int]] = {}
    appended: dict[str, int] = {}
    for c in snap.channels:
        topic = c.range.topic if clone is None else clone.topics[c.range.topic]
        if clone is not None:
            kafka.ensure(topic, len(c.range.end), empty=True)
        resume[topic] = kafka.append_channel(topic, sorted(c.range.end, key=int), records[c.range.topic])
        appended[topic] = len(records[c.range.topic])
    checkpoints: dict[str, str] = {}
    try:  # a failure from here on leaves the channels appended: say so, and what to do
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
            restored = restore_snapshot(store, stream, m.snapshot_id, target, force=clone is None,
                                        connection=connection, new_query_id=clone is not None,
                                        parallelism=parallelism, rewrite=rewrite)
            if rewrite is not None:
                check_resume(restored.target, m.batch_id, {t: offsets[t] for t in names.values() if t in resume},
                              store, connection)
            name = stream if clone is None else clone.names[stream]
            checkpoints[name] = restored.target
            if clone is not None and clone.expires_at is not None:
                own = [clone.topics[link.topic] for link in spec.outgoing(stream)]
                # The label beside the checkpoint is what lets expiry stop the clone and delete
                # its checkpoint (it deletes only a checkpoint labelled as that clone).
                write_clone_label(open_target(restored.target, store, connection),
                                  CloneLabel(name, stream, spec.members[stream], m.snapshot_id, m.batch_id,
                                             restored.query_id, {t: t for t in own},
                                             datetime.now(UTC).isoformat().replace("+00:00", "Z"), clone.expires_at))
                record_clone(store, clone=name, source_stream=stream, checkpoint=restored.target, snapshot_id=m.snapshot_id,
                             expires_at=clone.expires_at, sinks={t: t for t in own}, delete_sinks=bool(own),
                             kafka_conn_id=clone.kafka_conn_id)
    except Exception as exc:  # the channels are appended: whatever stopped it, say what to do
        raise _incomplete(exc, snap, appended, list(checkpoints), clone) from exc
    log.info("restored pipeline %s at %s%s: %s", spec.name, snap.snapshot_id, " as a clone" if clone else "",
             ", ".join(f"{k}={v}" for k, v in checkpoints.items()))
    return PipelineRestoreResult(spec.name, snap.snapshot_id, checkpoints, resume, appended,
                                 time.monotonic() - started, dict(clone.topics) if clone else {})
