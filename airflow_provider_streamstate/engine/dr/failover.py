"""Failover: resume a stream from a replicated snapshot against a mirrored Kafka cluster, exactly.

Spark's Kafka source keeps its offsets only in the checkpoint, and a mirror's offsets are
not the primary's (transaction markers, retention, a late start), so MirrorMaker 2's own
offset translation (consumer groups only, and lossy by design) cannot be used. Instead:

1. Each snapshot taken with the primary reachable records per partition the last record
   batch N consumed (`anchors.py`: timestamp, sha256 of key, value and headers, and how many
   identical records at that timestamp came before it).
2. At failover, each anchor is looked up in the mirrored partition — `offsetsForTimes` by
   its timestamp, then forward comparing digests — and the DR offset right after it is where
   the stream resumes. A partition with nothing consumed resumes at the mirror's beginning.
   A snapshot with an anchor the mirror does not hold yet is skipped (with the reason) for
   an older one; a topic whose partition count differs in DR is refused.
3. The snapshot is restored into a private staging directory and every place the
   checkpoint names Kafka topics and offsets (`offsets/<batch>` and `sources/<i>/0`, with
   their Hadoop `.crc` sidecars) is rewritten for the DR cluster; then the directory is
   renamed to the target. Nothing is written to the target unless all of it succeeded.

The same application, started on the target with the DR bootstrap and the DR topic names,
resumes with batch N+1: no record re-read, none skipped, whenever the mirror has the data.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_provider_streamstate.engine.catalog.index import SnapshotSummary, list_summaries
from airflow_provider_streamstate.engine.catalog.snapshots import get_snapshot, resolve_snapshot
from airflow_provider_streamstate.engine.checkpoint.filesystems import CheckpointFS
from airflow_provider_streamstate.engine.checkpoint.offset_rewrite import OffsetRewrite
from airflow_provider_streamstate.engine.core.anchor import anchors_from_json
from airflow_provider_streamstate.engine.core.cancel import current_token
from airflow_provider_streamstate.engine.core.errors import (
    NotFoundError,
    StreamstateError,
    TransientError,
    UnsafeManifestError,
    UsageError,
)
from airflow_provider_streamstate.engine.core.manifest import Manifest
from airflow_provider_streamstate.engine.dr.standby import (
    VERIFY_MODES,
    StandbyCheck,
    check_standby,
    mark_restored,
    promote_standby,
    standby_at,
)
from airflow_provider_streamstate.engine.kafka.anchors import (
    DEFAULT_TIMEOUT_S,
    kafka_consumer,
    message_digest,
    message_timestamp,
    offset_for_time,
    scan,
)
from airflow_provider_streamstate.engine.lifecycle.restore import (
    open_target,
    restore_snapshot,
    rewritten_files,
)
from airflow_provider_streamstate.engine.stores.base import SnapshotStore

log = logging.getLogger("streamstate.failover")
MIRROR_POLL_S = 2.0  # how often a failover waiting for the mirror looks again

POLICIES = ("default", "identity")


class Untranslatable(StreamstateError):
    """This snapshot cannot be resumed exactly on the DR cluster (an older one may)."""


class PartitionCountMismatch(UsageError):
    """A topic has another partition count in DR: records would not map one to one."""


@dataclass(frozen=True)
class TopicMap:
    """How the primary's topic names read in the DR cluster: explicit pairs first, then the
    mirror's replication policy (`default`: `<source alias>.<topic>`; `identity`: the same)."""

    pairs: dict[str, str] = field(default_factory=dict)
    policy: str = "default"
    source_alias: str = "primary"

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise UsageError(f"unknown replication policy {self.policy!r}", hint="use default or identity")
        if self.policy == "default" and not self.source_alias:
            raise UsageError("the default replication policy needs --source-alias",
                             hint="give the primary cluster's alias in the MirrorMaker 2 configuration")

    def dr_topic(self, topic: str) -> str:
        if topic in self.pairs:
            return self.pairs[topic]
        return topic if self.policy == "identity" else f"{self.source_alias}.{topic}"

    def check(self, topics: set[str]) -> None:
        unknown = sorted(set(self.pairs) - topics)
        if unknown:
            raise UsageError(
                f"--topic-map names {', '.join(unknown)}, which the checkpoint does not read",
                hint=f"the checkpoint reads {', '.join(sorted(topics)) or 'no Kafka topic'}; write SRC=DST with SRC one of them",
            )

    @classmethod
    def of(cls, items: dict[str, str] | list[str] | None, policy: str | None, source_alias: str | None) -> TopicMap:
        """As operators take it: pairs as a dict or `SRC=DST` items; empty policy: default."""
        pairs = [f"{k}={v}" for k, v in items.items()] if isinstance(items, dict) else list(items or [])
        return cls.parse(pairs, policy or "default", source_alias or "")

    @classmethod
    def parse(cls, items: list[str] | None, policy: str = "default", source_alias: str = "primary") -> TopicMap:
        pairs: dict[str, str] = {}
        for item in items or []:
            src, sep, dst = item.partition("=")
            if not sep or not src or not dst:
                raise UsageError(f"invalid topic map {item!r}", hint="write --topic-map SRC=DST, e.g. payments=primary.payments")
            pairs[src] = dst
        return cls(pairs, policy, source_alias)


@dataclass(frozen=True)
class TranslatedPartition:
    topic: str
    partition: int
    dr_topic: str
    primary_offset: int  # where the snapshot resumes in the primary
    dr_offset: int  # where it resumes in the DR cluster: right after the anchor record
    dr_end: int  # the DR partition's end offset when translated

    @property
    def behind(self) -> int:
        return max(0, self.dr_end - self.dr_offset)

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "dr_topic": self.dr_topic,
                "primary_offset": self.primary_offset, "dr_offset": self.dr_offset, "dr_end": self.dr_end}


@dataclass(frozen=True)
class Translation:
    snapshot_id: str
    batch_id: int
    partitions: list[TranslatedPartition]
    seconds: float

    @property
    def events_behind(self) -> int:
        """Records in the DR cluster after the resume point (what the resumed stream reads first)."""
        return sum(p.behind for p in self.partitions)

    def dr_offsets(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for p in self.partitions:
            out.setdefault(p.dr_topic, {})[str(p.partition)] = p.dr_offset
        return out

    def topic_names(self) -> dict[str, str]:
        return {p.topic: p.dr_topic for p in self.partitions}


def dr_consumer(bootstrap: str, config: dict[str, Any] | None, timeout_s: float) -> tuple[Any, dict[str, Any]]:
    """A consumer on the DR cluster and its topics; TransientError when it does not answer."""
    from confluent_kafka import KafkaException

    consumer = kafka_consumer(bootstrap, config, timeout_s)
    try:
        md = consumer.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        consumer.close()
        raise TransientError(f"cannot reach the DR Kafka cluster at {bootstrap}: {exc.args[0]}",
                             hint="check --kafka-bootstrap and that the DR brokers are up") from None
    return consumer, md.topics


def translate(
    manifest: Manifest, consumer: Any, topics: dict[str, Any], topic_map: TopicMap, *,
    timeout_s: float = DEFAULT_TIMEOUT_S, skip: frozenset[str] = frozenset(),
) -> Translation:
    """The DR offset of every partition the snapshot resumes, from its anchors (but the
    topics in `skip`: a pipeline's link topics, which a failover does not translate).

    Raises Untranslatable (an older snapshot may do) or PartitionCountMismatch (none will)."""
    from confluent_kafka import TopicPartition

    started = time.monotonic()
    sid = manifest.snapshot_id
    wanted = sorted((t, parts) for t, parts in manifest.kafka_offsets.items() if t not in skip)
    if wanted and manifest.kafka_anchors is None:
        raise Untranslatable(f"snapshot {sid} has no Kafka anchors (taken without the primary's bootstrap)")
    anchors = anchors_from_json(manifest.kafka_anchors) if wanted else {}
    out: list[TranslatedPartition] = []
    for topic, parts in wanted:
        dr_topic = topic_map.dr_topic(topic)
        md = topics.get(dr_topic)
        if md is None or md.error is not None:
            raise Untranslatable(f"topic {dr_topic} (the mirror of {topic}) does not exist in the DR cluster")
        ta = anchors.get(topic)
        if ta is None:
            raise Untranslatable(f"snapshot {sid} has no anchors for topic {topic}")
        if len(md.partitions) != ta.partition_count:
            raise PartitionCountMismatch(
                f"topic {topic} had {ta.partition_count} partitions in the primary, {dr_topic} has "
                f"{len(md.partitions)} in DR",
                hint="records would not map one to one; mirror into a topic with the same partition count",
            )
        for p, primary_offset in sorted(parts.items(), key=lambda x: int(x[0])):
            part = int(p)
            if p not in ta.partitions:
                raise Untranslatable(f"snapshot {sid} has no anchor for {topic}[{p}]")
            low, high = consumer.get_watermark_offsets(TopicPartition(dr_topic, part), timeout=timeout_s)
            anchor = ta.partitions[p]
            dr_offset: int | None
            if anchor is None:
                dr_offset = int(low)  # nothing consumed: everything the mirror holds is still to read
            else:
                dr_offset = _find(consumer, dr_topic, part, anchor.timestamp_ms, anchor.sha256, anchor.repeat,
                                  int(high), timeout_s)
                if dr_offset is None:
                    raise Untranslatable(
                        f"the last record batch {manifest.batch_id} read from {topic}[{p}] (primary offset "
                        f"{anchor.offset}, timestamp {anchor.timestamp_ms}) has not reached {dr_topic} in DR"
                    )
            out.append(TranslatedPartition(topic, part, dr_topic, primary_offset, dr_offset, int(high)))
    return Translation(sid, manifest.batch_id, out, time.monotonic() - started)


def _find(consumer: Any, topic: str, partition: int, ts: int, digest: str, repeat: int, high: int,
          timeout_s: float) -> int | None:
    """The offset right after the (repeat+1)-th record at `ts` with `digest`; None: not there."""
    first = offset_for_time(consumer, topic, partition, ts, timeout_s)
    if first < 0:
        return None
    seen = 0
    # Read in slices: the anchor is normally among the first records at its timestamp.
    start = first
    while start < high:
        batch = scan(consumer, topic, partition, start, min(high, start + 2000), timeout_s)
        if not batch:
            return None
        for m in batch:
            if message_timestamp(m) == ts and message_digest(m) == digest:
                if seen == repeat:
                    return int(m.offset()) + 1
                seen += 1
        start = int(batch[-1].offset()) + 1
    return None


# --- rewriting the checkpoint --------------------------------------------------------------


class DrRewrite(OffsetRewrite):
    """The DR version of the files that name Kafka offsets: the topics get their DR names and
    the offsets the translated ones (engine/checkpoint/offset_rewrite.py). A restore applies
    it while it stages the copy (engine/lifecycle/restore.py), so the target is written once. Batch N's offsets are where the query resumes; older
    batches get the same DR offsets (the DR cluster has no truthful translation of them) so
    the checkpoint names no primary offset anywhere."""

    def __init__(self, translation: Translation) -> None:
        super().__init__(translation.topic_names(), translation.dr_offsets())


# --- the whole failover --------------------------------------------------------------------


@dataclass(frozen=True)
class FailoverResult:
    stream: str
    snapshot_id: str
    batch_id: int
    target: str
    translated: list[TranslatedPartition]
    skipped_snapshots: list[tuple[str, str]]  # (snapshot id, why it could not be used)
    rewritten: list[str]
    seconds_choose: float  # finding a translatable snapshot (translation included)
    seconds_restore: float
    seconds_rewrite: float
    seconds_translate: float = 0.0  # the chosen snapshot's translation alone (part of seconds_choose)
    # With a warm standby: how it was checked, and whether it was promoted (else restored over).
    standby: StandbyCheck | None = None

    @property
    def events_behind(self) -> int:
        return sum(p.behind for p in self.translated)

    @property
    def standby_used(self) -> bool:
        return self.standby is not None and self.standby.usable

    def to_json(self) -> dict[str, Any]:
        return {
            "stream": self.stream, "snapshot_id": self.snapshot_id, "batch_id": self.batch_id, "target": self.target,
            "translated": [p.to_json() for p in self.translated],
            "skipped_snapshots": [{"snapshot_id": s, "reason": r} for s, r in self.skipped_snapshots],
            "events_behind": self.events_behind, "rewritten": self.rewritten,
            "seconds_choose": round(self.seconds_choose, 3), "seconds_restore": round(self.seconds_restore, 3),
            "seconds_rewrite": round(self.seconds_rewrite, 3), "seconds_translate": round(self.seconds_translate, 3),
            "standby": self._standby_json(),
            "seconds_verify_standby": round(self.standby.seconds, 3) if self.standby is not None else 0.0,
        }

    def _standby_json(self) -> dict[str, Any] | None:
        """The standby's check, `used` in the place of `usable` (it was promoted, or not)."""
        if self.standby is None:
            return None
        out = self.standby.to_json()
        out["used"] = out.pop("usable")
        return out


def _candidates(
    store: SnapshotStore, stream: str, snapshot: str | None, suite: str | None
) -> list[Manifest | SnapshotSummary]:
    """The snapshot asked for, or every snapshot of the current timeline, newest first (only
    those that passed `suite` when given); summaries, whose manifests are read when tried."""

    if snapshot is not None:
        return [resolve_snapshot(store, stream, snapshot)]
    listing = list_summaries(store, stream, update_index=False)  # a failover writes only its target
    out: list[Manifest | SnapshotSummary] = [s for s in listing.snapshots if listing.on_current_timeline(s)]
    out.sort(key=lambda m: (m.batch_id, m.snapshot_id), reverse=True)
    if suite is not None:
        out = [m for m in out if listing.validations.get(m.snapshot_id, {}).get(suite) is True]
        if not out:
            raise NotFoundError(f"no snapshot of {stream} has passed suite {suite}",
                                hint="fail over without --suite, or validate a snapshot first")
    return out


def _check_target(fs: CheckpointFS) -> None:
    if fs.exists() and (fs.local_path is not None and not fs.local_path.is_dir() or fs.files()):
        raise UsageError(f"target {fs.location} is not empty",
                         hint="fail over into a new or empty location (the stream's DR checkpoint location)")


def failover(
    store: SnapshotStore,
    stream: str,
    target: str | Path,
    kafka_bootstrap: str,
    *,
    snapshot: str | None = None,
    topic_map: TopicMap | None = None,
    suite: str | None = None,
    kafka_config: dict[str, Any] | None = None,
    parallelism: int = 8,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    mirror_wait_s: float = 0.0,
    connection: Any = None,
    standby: bool = False,
    verify_standby: str = "checksums",
) -> FailoverResult:
    """Restore `stream` from `store` into `target` (new or empty) for the DR cluster at
    `kafka_bootstrap`: the given `snapshot`, else the newest translatable one (that passed
    `suite` when given). Nothing is written unless it all succeeds.

    `mirror_wait_s`: for a given `snapshot` (a failback's final one, taken just now), wait
    up to this long for the mirror to bring its anchor records over instead of refusing.

    The target, on any checkpoint filesystem (a remote one written through `connection`,
    else the store's own when on the same service, else the environment's), is restored
    with the offsets already rewritten and published once (engine/lifecycle/restore.py).

    `standby`: `target` is a warm standby (engine/dr/standby.py). When it holds the chosen
    snapshot and verifies byte for byte (`verify_standby`: `checksums` or `full`), only the
    files naming Kafka offsets are rewritten in place and it is promoted; otherwise the
    snapshot is restored over it, and the result says why the standby was not used."""

    topic_map = topic_map or TopicMap()
    if verify_standby not in VERIFY_MODES:
        raise UsageError(f"unknown standby verification {verify_standby!r}", hint="use checksums or full")
    target_fs = open_target(target, store, connection)
    if standby:
        standby_at(target_fs)  # a promoted standby, or a checkpoint that is none, is refused before anything
    else:
        _check_target(target_fs)
    started = time.monotonic()
    manifest, translation, skipped = _choose(store, stream, kafka_bootstrap, snapshot=snapshot, topic_map=topic_map,
                                             suite=suite, kafka_config=kafka_config, timeout_s=timeout_s,
                                             mirror_wait_s=mirror_wait_s)
    chose_s = time.monotonic() - started
    rewrite = DrRewrite(translation)
    check: StandbyCheck | None = None
    if standby:
        # The bytes a restore for DR would write differently (small files, read and verified).
        t_rewrite = time.monotonic()
        rewritten = rewritten_files(store, manifest.files, rewrite)
        seconds_rewrite = time.monotonic() - t_rewrite
        check = check_standby(store, stream, target_fs, manifest.snapshot_id, verify=verify_standby,
                              skip=frozenset(rewritten), parallelism=parallelism)
        if check.usable:
            promoted = promote_standby(store, manifest, target_fs, rewritten)
            log.info("failover of %s: standby %s promoted with %s for %s, %d record(s) to catch up", stream,
                     target_fs.location, manifest.snapshot_id, kafka_bootstrap, translation.events_behind)
            return FailoverResult(stream, manifest.snapshot_id, manifest.batch_id, target_fs.shared_location,
                                  translation.partitions, skipped,
                                  [r for r in promoted.rewritten if not r.endswith(".crc")], chose_s, 0.0,
                                  seconds_rewrite + promoted.seconds, translation.seconds, standby=check)
        log.warning("failover of %s: the standby at %s is not used (%s): restoring %s into it", stream,
                    target_fs.location, check.reason, manifest.snapshot_id)
    # One restore, local or S3, written once with the DR offsets (and, for transformWithState,
    # the schema paths of the target itself), published whole or not at all; over a standby
    # that could not be used, replacing it whole.
    restored = restore_snapshot(store, stream, manifest.snapshot_id, target_fs, parallelism=parallelism,
                                rewrite=rewrite, force=standby)
    if check is not None:
        mark_restored(target_fs, store, manifest, check.reason or "")
    log.info("failover of %s: %s restored into %s for %s, %d record(s) to catch up",
             stream, manifest.snapshot_id, restored.target, kafka_bootstrap, translation.events_behind)
    return FailoverResult(stream, manifest.snapshot_id, manifest.batch_id, restored.target, translation.partitions,
                          skipped, [r for r in restored.rewritten if not r.endswith(".crc")], chose_s,
                          restored.seconds - restored.seconds_rewrite, restored.seconds_rewrite, translation.seconds,
                          standby=check)


def _choose(
    store: SnapshotStore, stream: str, kafka_bootstrap: str, *, snapshot: str | None, topic_map: TopicMap,
    suite: str | None, kafka_config: dict[str, Any] | None, timeout_s: float, mirror_wait_s: float,
) -> tuple[Manifest, Translation, list[tuple[str, str]]]:
    """The snapshot to resume from and its translation for the DR cluster, with the newer
    snapshots skipped and why (see `failover`)."""
    consumer, topics = dr_consumer(kafka_bootstrap, kafka_config, timeout_s)
    try:
        candidates = _candidates(store, stream, snapshot, suite)
        topic_map.check({t for m in candidates for t in m.kafka_offsets})
        skipped: list[tuple[str, str]] = []
        chosen: tuple[Manifest, Translation] | None = None
        wait_until = time.monotonic() + (mirror_wait_s if snapshot is not None else 0.0)
        for c in candidates:
            try:
                m = c if isinstance(c, Manifest) else get_snapshot(store, stream, c.snapshot_id)
            except (NotFoundError, UnsafeManifestError) as exc:  # deleted since the listing, or damaged
                log.info("failover of %s: skipping %s: %s", stream, c.snapshot_id, exc.message)
                skipped.append((c.snapshot_id, exc.message))
                continue
            while True:
                try:
                    chosen = (m, translate(m, consumer, topics, topic_map, timeout_s=timeout_s))
                    break
                except Untranslatable as exc:
                    if time.monotonic() < wait_until:
                        log.info("failover of %s: waiting for the mirror: %s", stream, exc.message)
                        token = current_token()
                        if token is not None and token.wait(MIRROR_POLL_S):
                            token.raise_if_cancelled()
                        elif token is None:
                            time.sleep(MIRROR_POLL_S)
                        topics = consumer.list_topics(timeout=timeout_s).topics
                        continue
                    log.info("failover of %s: skipping %s: %s", stream, m.snapshot_id, exc.message)
                    skipped.append((m.snapshot_id, exc.message))
                    break
            if chosen is not None:
                break
    finally:
        consumer.close()
    if chosen is None:
        reasons = "; ".join(f"{s}: {r}" for s, r in skipped[:3])
        raise NotFoundError(f"no snapshot of {stream} can resume exactly on the DR cluster ({reasons})",
                            hint="wait for the mirror to catch up, or take a snapshot with --kafka-bootstrap")
    return chosen[0], chosen[1], skipped
