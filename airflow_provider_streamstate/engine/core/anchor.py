"""Anchors as a manifest records them: per topic-partition, the identity of the last record
the snapshot's batch consumed (offset, timestamp, sha256 of key, value and headers, and how
many identical records precede it). Reading them from a broker, and finding them again in
a mirror, is engine/kafka/; this module is only the data and its validation, since a
manifest read back is untrusted input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_provider_streamstate.engine.core.digest import SHA256_RE
from airflow_provider_streamstate.engine.core.errors import UnsafeManifestError


@dataclass(frozen=True)
class Anchor:
    """The last data record a batch consumed in one partition, as the primary had it."""

    offset: int  # in the primary partition (informational: it means nothing elsewhere)
    timestamp_ms: int
    sha256: str
    repeat: int  # identical records (same timestamp and digest) before it, from the first at that timestamp

    def to_json(self) -> dict[str, Any]:
        return {"offset": self.offset, "timestamp_ms": self.timestamp_ms, "sha256": self.sha256, "repeat": self.repeat}

    @classmethod
    def from_json(cls, d: Any, where: str) -> Anchor:
        def num(k: str, lo: int) -> int:
            v = d.get(k)
            if not isinstance(v, int) or isinstance(v, bool) or not lo <= v < 2**63:
                raise UnsafeManifestError(f"{where}: {k} {v!r} is not an integer >= {lo}")
            return v

        if not isinstance(d, dict):
            raise UnsafeManifestError(f"{where} is not an object")
        sha = d.get("sha256")
        if not isinstance(sha, str) or not SHA256_RE.match(sha):
            raise UnsafeManifestError(f"{where}: sha256 {sha!r} is not 64 hex digits")
        return cls(num("offset", 0), num("timestamp_ms", -1), sha, num("repeat", 0))


@dataclass(frozen=True)
class TopicAnchors:
    """A topic's partition count when the snapshot was taken, and each partition's anchor:
    None when the batch consumed nothing there (it maps to the mirror's beginning)."""

    partition_count: int
    partitions: dict[str, Anchor | None]

    def to_json(self) -> dict[str, Any]:
        return {
            "partition_count": self.partition_count,
            "partitions": {p: (a.to_json() if a else None) for p, a in self.partitions.items()},
        }


def anchors_to_json(anchors: dict[str, TopicAnchors]) -> dict[str, Any]:
    return {t: a.to_json() for t, a in sorted(anchors.items())}


def anchors_from_json(d: Any, where: str = "kafka_anchors") -> dict[str, TopicAnchors]:
    """Validate a manifest's untrusted `kafka_anchors`."""
    if not isinstance(d, dict):
        raise UnsafeManifestError(f"{where} is not an object")
    out: dict[str, TopicAnchors] = {}
    for topic, ta in d.items():
        if not isinstance(topic, str) or not topic or not isinstance(ta, dict):
            raise UnsafeManifestError(f"{where}: topic {topic!r} is not an object")
        count = ta.get("partition_count")
        parts = ta.get("partitions")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1 or not isinstance(parts, dict):
            raise UnsafeManifestError(f"{where}: topic {topic} needs partition_count >= 1 and partitions")
        anchors: dict[str, Anchor | None] = {}
        for p, a in parts.items():
            if not (isinstance(p, str) and p.isdigit()):
                raise UnsafeManifestError(f"{where}: partition {p!r} of {topic} is not a number")
            anchors[str(int(p))] = None if a is None else Anchor.from_json(a, f"{where}.{topic}[{p}]")
        out[topic] = TopicAnchors(count, anchors)
    return out
