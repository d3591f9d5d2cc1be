"""Failing a pipeline over to the DR region as one: every member resumes from the same
pipeline snapshot on the DR Kafka cluster, no record lost or counted twice.

Two kinds of topic are read by the members, and each is handled the way that is exact:
- A topic from outside the pipeline (a source) is mirrored into the DR cluster; its DR
  offsets are translated from the member snapshot's anchors, as a stream's failover does
  (engine/dr/failover.py).
- A link topic is not translated. In the DR region the restored upstream writes its link
  topic there (by default under the same name; `link_topics` maps another), and produces
  again everything it produced after the cut; what it had produced before the cut and the
  downstream had not read yet is the cut's channel, kept in the snapshot store. The channel
  is appended to the DR link topic after everything it holds (a mirror of the primary's
  link topic, or nothing), and the downstream resumes exactly there: it reads the channel,
  then what the DR upstream produces. Whatever a mirror had brought into that topic lies
  before the resume point and is never read.

So the DR pipeline reads every source record once: the upstream from its translated
offsets; the downstream every link record the upstream produced before the cut and it had
not read (the channel), then every one produced after (by the DR upstream, anew).

The pipeline snapshot is the one given, else the newest whose every member translates
(known-good only with `good_only`), from the (DR) store it was replicated to. Every target
must be new or empty; before Kafka is written, every member is translated and every target
checked. The channels are appended, then the members restored (each restore is atomic);
when one fails, the targets this run wrote are removed, so the failover can be run again
(the channel records it appended lie before the next run's resume point, never read).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from airflow_provider_streamstate.engine.catalog.snapshots import get_snapshot
from airflow_provider_streamstate.engine.checkpoint.offset_rewrite import OffsetRewrite
from airflow_provider_streamstate.engine.core.errors import NotFoundError, UnsafeManifestError, UsageError
from airflow_provider_streamstate.engine.core.manifest import Manifest
from airflow_provider_streamstate.engine.dr.failover import (
    TopicMap,
    TranslatedPartition,
    Translation,
    Untranslatable,
    dr_consumer,
    translate,
)
from airflow_provider_streamstate.engine.kafka.anchors import DEFAULT_TIMEOUT_S
from airflow_provider_streamstate.engine.lifecycle.restore import open_target, restore_snapshot
from airflow_provider_streamstate.engine.pipeline.link_topics import LinkTopics
from airflow_provider_streamstate.engine.pipeline.restore import check_resume, check_target
from airflow_provider_streamstate.engine.pipeline.snapshots import (
    PipelineSnapshot,
    get_pipeline_snapshot,
    known_good,
    list_pipeline_snapshots,
    member_validations,
)
from airflow_provider_streamstate.engine.pipeline.spec import PipelineSpec
from airflow_provider_streamstate.engine.stores.base import SnapshotStore

log = logging.getLogger("streamstate.pipeline")


@dataclass(frozen=True)
class MemberFailover:
    stream: str
    snapshot_id: str
    batch_id: int
    target: str
    translated: list[TranslatedPartition]  # its source topics, primary -> DR
    links: dict[str, dict[str, int]]  # DR link topic -> partition -> where it resumes (the channel's start)

    @property
    def events_behind(self) -> int:
        """Source records in the DR cluster after its resume points (the channels not counted)."""
        return sum(p.behind for p in self.translated)

    def to_json(self) -> dict[str, Any]:
        return {"snapshot_id": self.snapshot_id, "batch_id": self.batch_id, "target": self.target,
                "translated": [p.to_json() for p in self.translated], "links": self.links,
                "events_behind": self.events_behind}


@dataclass(frozen=True)
class PipelineFailoverResult:
    pipeline: str
    snapshot_id: str
    members: dict[str, MemberFailover]
    channel_records: dict[str, int]  # DR link topic -> channel records appended
    skipped_snapshots: list[tuple[str, str]]  # (pipeline snapshot id, why it could not be used)
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {"pipeline": self.pipeline, "snapshot_id": self.snapshot_id,
                "members": {s: m.to_json() for s, m in sorted(self.members.items())},
                "channel_records": self.channel_records,
                "skipped_snapshots": [{"snapshot_id": s, "reason": r} for s, r in self.skipped_snapshots],
                "seconds": round(self.seconds, 3)}


def _candidates(store: SnapshotStore, pipeline: str, snapshot: str | None, good_only: bool) -> list[str]:
    if snapshot is not None:
        return [get_pipeline_snapshot(store, pipeline, snapshot, check_members=False).snapshot_id]
    ids = list(reversed(list_pipeline_snapshots(store, pipeline)))
    if not ids:
        raise NotFoundError(f"pipeline {pipeline} has no snapshot in {store.url}",
                            hint="replicate the pipeline's snapshots to this store first")
    return ids


def _translate_members(snap: PipelineSnapshot, manifests: dict[str, Manifest], consumer: Any, topics: dict[str, Any],
                       topic_map: TopicMap, timeout_s: float) -> dict[str, Translation]:
    """Every member's source topics translated (raises Untranslatable for the first that is not)."""
    out: dict[str, Translation] = {}
    for stream in snap.spec.order():
        links = frozenset(link.topic for link in snap.spec.incoming(stream))
        out[stream] = translate(manifests[stream], consumer, topics, topic_map, timeout_s=timeout_s, skip=links)
    return out


def _remove(target: str, store: SnapshotStore, connection: Any) -> None:
    """Undo one member's restore of this run (its target was new or empty before)."""
    open_target(target, store, connection).delete_all()


def _check_arguments(spec: PipelineSpec, targets: dict[str, str], link_topics: dict[str, str],
                     topic_map: TopicMap) -> None:
    """Targets one per member; link topic names of this pipeline, mapped to distinct DR
    topics, none of them where the mirror copies the primary's link topic unless named."""
    links = sorted(link.topic for link in spec.links)
    unknown = sorted(set(link_topics) - set(links))
    if unknown:
        raise UsageError(f"--link-topic names {', '.join(unknown)}, which is not a link of pipeline {spec.name}",
                         hint=f"its links are {', '.join(links)}")
    if set(targets) != set(spec.members):
        raise UsageError(f"the failover of pipeline {spec.name} gives targets for {', '.join(sorted(targets)) or 'no member'}",
                         hint=f"give one DR checkpoint location for each of {', '.join(sorted(spec.members))}")
    dr_links = [link_topics.get(t, t) for t in links]
    if len(set(dr_links)) != len(dr_links):
        raise UsageError(f"two links of pipeline {spec.name} map to one DR topic ({', '.join(dr_links)})",
                         hint="give each link its own DR topic: each downstream resumes at its own channel")
    for topic in links:
        dr_link = link_topics.get(topic, topic)
        if topic_map.dr_topic(topic) == dr_link and topic not in link_topics:
            raise UsageError(
                f"DR link topic {dr_link} is where the mirror copies the primary's {topic} ({topic_map.policy} "
                "policy): records it still copies would land after the channel and be read twice",
                hint=f"stop mirroring the pipeline's link topics, then confirm with --link-topic {topic}={dr_link} "
                     "(or name another DR topic)")


def _remove_written(targets: list[str], store: SnapshotStore, connection: Any) -> None:
    """Best effort: each target this run wrote (or began to write) goes; a failure to remove
    one is logged, never hides the error that stopped the failover."""
    for target in targets:
        try:
            _remove(target, store, connection)
        except Exception as exc:  # noqa: BLE001 - the original error is the one to raise
            log.warning("failover: could not remove %s: %s; remove it before running the failover again", target, exc)


def failover_pipeline(
    store: SnapshotStore,
    pipeline: str,
    targets: dict[str, str],
    kafka_bootstrap: str,
    *,
    snapshot: str | None = None,
    topic_map: TopicMap | None = None,
    link_topics: dict[str, str] | None = None,
    good_only: bool = False,
    kafka_config: dict[str, Any] | None = None,
    connection: Any = None,
    parallelism: int = 8,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> PipelineFailoverResult:
    """Resume every member of `pipeline` on the DR cluster at `kafka_bootstrap`, each into
    its `targets` location (new or empty): from `snapshot`, else the newest pipeline
    snapshot (every member known-good with `good_only`) whose members all translate.

    `topic_map`: the DR names of the source topics (the mirror's policy, or pairs).
    `link_topics`: the DR name of a link topic, where the DR upstream writes (default: its
    own name)."""
    started = time.monotonic()
    topic_map = topic_map or TopicMap()
    link_topics = dict(link_topics or {})
    candidates = _candidates(store, pipeline, snapshot, good_only)
    # The arguments against the newest candidate's spec, before Kafka is asked anything.
    _check_arguments(get_pipeline_snapshot(store, pipeline, candidates[0], check_members=False).spec, targets,
                     link_topics, topic_map)
    skipped: list[tuple[str, str]] = []
    chosen: tuple[PipelineSnapshot, dict[str, Translation], dict[str, list[Any]]] | None = None
    consumer, topics = dr_consumer(kafka_bootstrap, kafka_config, timeout_s)
    try:
        for sid in candidates:
            try:
                snap = get_pipeline_snapshot(store, pipeline, sid)
                if good_only and not known_good(member_validations(store, snap)):
                    skipped.append((sid, "not every member passed its validations"))
                    continue
                manifests = {s: get_snapshot(store, s, m.snapshot_id) for s, m in snap.members.items()}
                translations = _translate_members(snap, manifests, consumer, topics, topic_map, timeout_s)
                records = {c.range.topic: snap.channel_records(store, c) for c in snap.channels}  # checked
                chosen = (snap, translations, records)
                break
            except (Untranslatable, NotFoundError, UnsafeManifestError) as exc:
                if snapshot is not None and not isinstance(exc, Untranslatable):
                    raise
                log.info("failover of pipeline %s: skipping %s: %s", pipeline, sid, exc.message)
                skipped.append((sid, exc.message))
    finally:
        consumer.close()
    if chosen is None:
        reasons = "; ".join(f"{s}: {r}" for s, r in skipped[:3])
        raise NotFoundError(f"no snapshot of pipeline {pipeline} can resume exactly on the DR cluster ({reasons})",
                            hint="wait for the mirror to catch up, replicate a newer pipeline snapshot, or (with "
                                 "--good-only) validate one in the DR store")
    snap, translations, records = chosen
    spec = snap.spec
    _check_arguments(spec, targets, link_topics, topic_map)
    translated = {p.dr_topic for t in translations.values() for p in t.partitions}
    clash = sorted(translated & {link_topics.get(c.range.topic, c.range.topic) for c in snap.channels})
    if clash:
        raise UsageError(f"DR topic {', '.join(clash)} is both a link's and a mirrored source's",
                         hint="give the link its own DR topic with --link-topic")
    for stream in spec.order():
        check_target(targets[stream], in_place=False, store=store, connection=connection, role="DR target")
    kafka = LinkTopics(kafka_bootstrap, kafka_config)
    for c in snap.channels:  # every link topic checked before the first channel is appended
        dr_link = link_topics.get(c.range.topic, c.range.topic)
        have = kafka.partitions(dr_link)
        if have is not None and len(have) != len(c.range.end):
            raise UsageError(f"DR link topic {dr_link} has {len(have)} partitions, link {c.range.topic} had "
                             f"{len(c.range.end)} at the cut",
                             hint="name a DR topic with that partition count, or a new one, with --link-topic")

    resume: dict[str, dict[str, int]] = {}
    appended: dict[str, int] = {}
    for c in snap.channels:
        dr_link = link_topics.get(c.range.topic, c.range.topic)
        kafka.ensure(dr_link, len(c.range.end), empty=False)
        resume[dr_link] = kafka.append_channel(dr_link, sorted(c.range.end, key=int), records[c.range.topic])
        appended[dr_link] = len(records[c.range.topic])

    members: dict[str, MemberFailover] = {}
    begun: list[str] = []  # targets this run wrote or began to write (each was new or empty)
    try:
        for stream in spec.order():
            m, translation = snap.members[stream], translations[stream]
            names = translation.topic_names()
            offsets = translation.dr_offsets()
            links: dict[str, dict[str, int]] = {}
            for link in spec.incoming(stream):
                dr_link = link_topics.get(link.topic, link.topic)
                names[link.topic] = dr_link
                offsets[dr_link] = links[dr_link] = resume[dr_link]
            begun.append(targets[stream])
            restored = restore_snapshot(store, stream, m.snapshot_id, targets[stream], connection=connection,
                                        parallelism=parallelism, rewrite=OffsetRewrite(names, offsets))
            if links:
                check_resume(restored.target, m.batch_id, links, store, connection)
            members[stream] = MemberFailover(stream, m.snapshot_id, m.batch_id, restored.target,
                                             translation.partitions, links)
        # Nothing but the channel may follow the resume point: a mirror still copying into a
        # DR link topic, or another failover appending its own copy, would be read after it.
        for dr_link, at in resume.items():
            parts = sorted(at, key=int)
            end = kafka.ends(dr_link, parts)
            grew = sum(end[p] - at[p] for p in parts) - appended[dr_link]
            if grew:
                raise UsageError(
                    f"{dr_link} grew by {grew} record(s) after the channel was appended: something else writes to it "
                    "(a mirror, another failover)", hint="stop it, then run the failover again")
    except BaseException:
        _remove_written(begun, store, connection)
        raise
    log.info("failed over pipeline %s at %s to %s: %s", pipeline, snap.snapshot_id, kafka_bootstrap,
             ", ".join(f"{s}={m.target}" for s, m in members.items()))
    return PipelineFailoverResult(pipeline, snap.snapshot_id, members, appended, skipped, time.monotonic() - started)
