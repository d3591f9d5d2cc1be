"""What an edit would change, read without Spark before anything is written (the dry run,
and the `before` the verification starts from): each key's current stored value, and per
operator, store and partition how many keys would be removed, replaced or added, and how
many of the keys to delete are not there (nothing to do)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_streamstate.engine.edit.changes import KeyChange, provider_of
from airflow_provider_streamstate.engine.lookup.encodings.values import to_jsonable
from airflow_provider_streamstate.engine.lookup.formats.codec import codec_name
from airflow_provider_streamstate.engine.lookup.reading.cache import PartitionCache
from airflow_provider_streamstate.engine.lookup.reading.partitions import Reads, lookup_partition
from airflow_provider_streamstate.engine.lookup.reading.sources import StateSource

MAX_LISTED = 100  # keys a preview lists one by one (all are counted)


@dataclass(frozen=True)
class PartitionCount:
    operator_id: int
    operator: str
    store: str
    partition: int
    removed: int  # keys deleted that were there
    absent: int  # keys to delete that are not there
    replaced: int  # keys set that were there
    added: int  # keys set that were not

    def to_json(self) -> dict[str, Any]:
        return {"operator_id": self.operator_id, "operator": self.operator, "store": self.store,
                "partition": self.partition, "removed": self.removed, "absent": self.absent,
                "replaced": self.replaced, "added": self.added}


@dataclass(frozen=True)
class EditPreview:
    """An edit against one batch of a checkpoint or snapshot, nothing written."""

    source: str
    batch_id: int
    partitions: tuple[PartitionCount, ...]
    keys: tuple[dict[str, Any], ...]  # up to MAX_LISTED: operator, partition, key, before/after found

    @property
    def changed(self) -> int:
        return sum(p.removed + p.replaced + p.added for p in self.partitions)

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "batch_id": self.batch_id, "changed": self.changed,
                "partitions": [p.to_json() for p in self.partitions], "keys": list(self.keys)}


def current_values(src: StateSource, changes: Sequence[KeyChange]) -> list[bytes | None]:
    """Each changed key's stored value at `src`'s batch (None: not there), reading only the
    partitions the keys are in, and of those only what the keys need."""
    provider = provider_of(src.conf, src.description)
    codec = codec_name(src.conf)
    cache = PartitionCache(max_entries=64, max_bytes=256 << 20)
    out = []
    parts: dict[tuple[int, str, int], Any] = {}
    for c in changes:
        part = parts.get(c.where)
        if part is None:
            op = src.operator(c.operator_id)
            part = parts[c.where] = lookup_partition(src, op, c.partition, c.store, provider, codec, cache, Reads())
        out.append(part.get(c.key_bytes))
    return out


def preview(src: StateSource, changes: Sequence[KeyChange], before: Sequence[bytes | None]) -> EditPreview:
    counts: dict[tuple[int, str, int], list[int]] = {}
    names: dict[int, str] = {}
    keys: list[dict[str, Any]] = []
    for c, old in zip(changes, before, strict=True):
        names[c.operator_id] = c.operator
        acc = counts.setdefault(c.where, [0, 0, 0, 0])
        acc[(0 if old is not None else 1) if c.value_bytes is None else (2 if old is not None else 3)] += 1
        if len(keys) < MAX_LISTED:
            keys.append({"operator_id": c.operator_id, "store": c.store, "partition": c.partition,
                         "key": to_jsonable(c.key), "found": old is not None,
                         "action": "delete" if c.value is None else "set",
                         "value": to_jsonable(c.value) if c.value is not None else None})
    parts = tuple(PartitionCount(op, names[op], store, p, *acc) for (op, store, p), acc in sorted(counts.items()))
    return EditPreview(src.description, src.batch_id, parts, tuple(keys))
