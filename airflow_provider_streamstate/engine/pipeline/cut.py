"""A consistent cut across the streams of a pipeline, taken while they run.

For every link (upstream U writes topic T, downstream D reads it) the cut picks one committed
batch of each and needs, per partition of T, D's read offset at its batch <= the end of what
U had produced up to its batch. Then D's state holds only records U's snapshot has already
produced, and the records in between (produced, not yet read) are the link's channel state.

The evidence for "what U had produced up to batch n" is an observation, not a guess: Spark
writes `offsets/<n+1>` before batch n+1 runs (so before its Kafka sink writes anything) and
`commits/<n>` only after batch n's sink tasks have flushed their producers. So if a listing
finds `offsets/n` the newest and `commits/n` present, then the end offsets of T are read, and
a second listing still finds no `offsets/n+1`, those end offsets are exactly the end of
everything batches <= n produced (U being T's only writer). The cut waits for such a moment
(between two of U's batches), member by member from the most downstream up, so each
downstream's batch was planned before its upstream's observation and read no further than
it. A most-downstream member needs no observation: its newest retained committed batch whose
read offsets are within its upstreams' produced ones is taken. docs/concepts.md, "Pipelines".
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.core.cancel import check_cancelled
from airflow_provider_streamstate.engine.core.errors import NotFoundError, TransientError, UsageError
from airflow_provider_streamstate.engine.kafka.offsets import admin_client, list_offsets
from airflow_provider_streamstate.engine.pipeline.spec import PipelineSpec

log = logging.getLogger("streamstate.pipeline")

DEFAULT_WAIT_S = 120.0  # for a moment between two batches of each upstream
POLL_S = 0.02

Offsets = dict[str, dict[str, int]]  # topic -> partition -> offset


@dataclass(frozen=True)
class MemberCut:
    """One member's batch in the cut: `reads` is where its next batch starts in each topic it
    reads; `produced` (upstreams only) the end of each link topic it writes, as observed."""

    stream: str
    batch_id: int
    reads: Offsets
    produced: Offsets
    observed_at_ms: int | None  # when `produced` was read (None: not an upstream)

    def to_json(self) -> dict[str, Any]:
        return {"stream": self.stream, "batch_id": self.batch_id, "reads": self.reads, "produced": self.produced,
                "observed_at_ms": self.observed_at_ms}


@dataclass(frozen=True)
class ChannelRange:
    """The link's records produced before the upstream's cut and not read by the downstream's:
    per partition, [start, end)."""

    topic: str
    upstream: str
    downstream: str
    start: dict[str, int]
    end: dict[str, int]

    @property
    def records(self) -> int:
        """Offsets in the range (records, unless the topic is compacted or transactional)."""
        return sum(self.end[p] - self.start[p] for p in self.end)

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "upstream": self.upstream, "downstream": self.downstream,
                "start": self.start, "end": self.end}


@dataclass(frozen=True)
class PipelineCut:
    members: dict[str, MemberCut]
    channels: list[ChannelRange]
    seconds: float


def _link_partitions(admin: Any, spec: PipelineSpec, bootstrap: str, timeout_s: float) -> dict[str, list[int]]:
    from confluent_kafka import KafkaException

    try:
        topics = admin.list_topics(timeout=timeout_s).topics
    except KafkaException as exc:
        raise TransientError(f"cannot reach Kafka at {bootstrap}: {exc}",
                             hint="check the bootstrap servers and that the brokers are up") from None
    out: dict[str, list[int]] = {}
    for link in spec.links:
        meta = topics.get(link.topic)
        if meta is None or meta.error is not None:
            raise NotFoundError(f"link topic {link.topic} of pipeline {spec.name} does not exist at {bootstrap}",
                                hint="check the pipeline spec's topic names and --kafka-bootstrap")
        out[link.topic] = sorted(meta.partitions)
    return out


def _observe_between_batches(stream: str, reader: CheckpointReader, admin: Any, topics: dict[str, list[int]],
                             deadline: float, timeout_s: float) -> tuple[int, Offsets, int]:
    """(batch n, end offsets of `topics`, when) read while n was committed and n+1 not begun."""
    while True:
        check_cancelled()
        started = reader.started_batches()
        if started and started[-1] in set(reader.committed_batches()):
            n = started[-1]
            ends = list_offsets(admin, topics, timeout_s=timeout_s)
            at_ms = int(time.time() * 1000)
            if (reader.started_batches() or [-1])[-1] == n:
                return n, ends, at_ms
        if time.monotonic() > deadline:
            if not started:
                raise NotFoundError(f"stream {stream} ({reader.where}) has no batch yet",
                                    hint="start the pipeline's streams, then take the cut")
            raise TransientError(
                f"stream {stream} was never between two batches while the cut waited (newest batch {started[-1]})",
                hint="the cut reads its link topics' end offsets between two of its batches: give it a "
                     "processing-time trigger that leaves a pause, or a longer --wait")
        time.sleep(POLL_S)


def _within(reads: Offsets, topic: str, produced: dict[str, int]) -> bool:
    got = reads.get(topic)
    return got is not None and set(got) == set(produced) and all(got[p] <= produced[p] for p in produced)


def find_cut(
    spec: PipelineSpec, kafka_bootstrap: str, *, kafka_config: dict[str, Any] | None = None,
    connection: Any = None, wait_s: float = DEFAULT_WAIT_S, timeout_s: float = 10.0,
) -> PipelineCut:
    """One committed batch per member forming a consistent cut of the running pipeline (the
    module docstring); nothing is written."""
    started = time.monotonic()
    readers = {s: CheckpointReader(loc, connection=connection) for s, loc in spec.members.items()}
    for link in spec.links:  # the downstream must read the topic it is linked by
        read = {t for b in readers[link.downstream].committed_batches()[-1:]
                for t in readers[link.downstream].kafka_offsets(b)}
        if read and link.topic not in read:
            raise UsageError(f"{link.downstream} of pipeline {spec.name} does not read {link.topic} "
                             f"(its checkpoint reads {', '.join(sorted(read))})",
                             hint="check the pipeline spec's links against each query's Kafka source")
    admin = admin_client(kafka_bootstrap, kafka_config)
    partitions = _link_partitions(admin, spec, kafka_bootstrap, timeout_s)
    deadline = time.monotonic() + wait_s
    observed: dict[str, tuple[int, Offsets, int]] = {}
    for stream in reversed(spec.order()):  # downstream first: each upstream is observed after its readers
        out_topics = {link.topic: partitions[link.topic] for link in spec.outgoing(stream)}
        if out_topics:
            observed[stream] = _observe_between_batches(stream, readers[stream], admin, out_topics, deadline, timeout_s)
    members: dict[str, MemberCut] = {}
    produced_by = {link.topic: observed[link.upstream][1][link.topic] for link in spec.links}
    for stream in spec.order():
        reader, incoming = readers[stream], spec.incoming(stream)
        if stream in observed:
            batch, produced, at_ms = observed[stream]
            reads = reader.kafka_offsets(batch)
            moved = [link.topic for link in incoming if set(reads.get(link.topic, {})) != set(produced_by[link.topic])]
            if moved:
                raise UsageError(f"the partitions {stream} reads of {', '.join(moved)} are not the topic's "
                                 f"(partitions were added while the cut was taken)",
                                 hint="take the cut again once the downstream reads every partition")
            bad = [link.topic for link in incoming if not _within(reads, link.topic, produced_by[link.topic])]
            if bad:  # cannot happen when the upstream was observed after this batch was planned
                raise TransientError(f"batch {batch} of {stream} read {', '.join(bad)} past its upstream's cut",
                                     hint="retry the cut")
            members[stream] = MemberCut(stream, batch, reads, produced, at_ms)
            continue
        for batch in reversed(reader.committed_batches()):
            reads = reader.kafka_offsets(batch)
            if all(_within(reads, link.topic, produced_by[link.topic]) for link in incoming):
                members[stream] = MemberCut(stream, batch, reads, {}, None)
                break
        else:
            committed = reader.committed_batches()
            raise NotFoundError(
                f"no retained committed batch of {stream} reads only what its upstreams had produced at their cut "
                f"(retained batches {committed[0] if committed else '-'}..{committed[-1] if committed else '-'})",
                hint="retry the cut; keep more batches (spark.sql.streaming.minBatchesToRetain) if it lags far behind")
    channels = [ChannelRange(link.topic, link.upstream, link.downstream,
                             {p: members[link.downstream].reads[link.topic][p] for p in produced_by[link.topic]},
                             dict(produced_by[link.topic])) for link in spec.links]
    cut = PipelineCut(members, channels, time.monotonic() - started)
    log.info("cut of pipeline %s: %s; channel records %s", spec.name,
             ", ".join(f"{m.stream}@{m.batch_id}" for m in members.values()),
             ", ".join(f"{c.topic}={c.records}" for c in channels))
    return cut
