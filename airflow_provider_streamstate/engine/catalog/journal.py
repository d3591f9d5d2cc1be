"""The journal: which manifests of a stream were published or deleted since a moment, from
one listing that starts there (S3 `StartAfter`; elsewhere the names are filtered).

Every store writes a hint just before it publishes a manifest and just before it moves one
aside (`SnapshotStore.put_manifest`, `delete_manifest`):

    streams/<stream>/journal/<UTC time to the µs>Z-<p|d>-<snapshot id>.json

named by the writer's clock. A hint is only a pointer: the reader checks the manifest
itself (a writer that died after its hint published nothing). The catalog index records
when the listing it is built from began (its horizon H); the changes since are the hints
after H - `SKEW_SECONDS`. That margin covers the writers' clocks (within a few minutes of
each other) and a publish's own duration (its hint is written first): a manifest that
appeared after the index's listing has a hint the next reader lists.

Garbage collection prunes hints older than `KEEP_SECONDS`; an index older than half of that
is rebuilt from a full listing before it is trusted (catalog/index.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache

from airflow_provider_streamstate.engine.core.manifest import SNAPSHOT_ID_RE
from airflow_provider_streamstate.engine.stores.base import (
    DELETED,
    JOURNAL_KIND,
    JOURNAL_NAME_RE,
    MANIFEST_SUFFIX,
    PUBLISHED,
    STREAMS_PREFIX,
    SnapshotStore,
)

SKEW_SECONDS = 900  # clock skew between writers and readers, plus a publish's own duration
KEEP_SECONDS = 7 * 86400  # hints older than this may be pruned (by garbage collection)

__all__ = ["DELETED", "PUBLISHED", "Event", "changes_since", "prune", "time_text"]


@dataclass(frozen=True, order=True)
class Event:
    """One hint: at `when` (the writer's clock, id-style text), snapshot `snapshot_id` was
    published (`p`) or deleted (`d`)."""

    when: str
    kind: str
    snapshot_id: str
    key: str


def prefix(stream: str) -> str:
    return f"{STREAMS_PREFIX}/{stream}/{JOURNAL_KIND}/"


def time_text(dt: datetime) -> str:
    """A time as hints name it (sorts as time): YYYYMMDDTHHMMSSffffffZ."""
    return dt.astimezone(UTC).strftime("%Y%m%dT%H%M%S%f") + "Z"


@lru_cache(maxsize=1 << 14)  # a hint's name never changes: a reader that lists again parses only new ones
def parse(key: str, stream: str) -> Event | None:
    name = key[len(prefix(stream)):].removesuffix(MANIFEST_SUFFIX)
    m = JOURNAL_NAME_RE.match(name)
    if m is None or not SNAPSHOT_ID_RE.match(m.group(3)):
        return None  # not a hint this engine wrote: ignored
    return Event(m.group(1), m.group(2), m.group(3), key)


def changes_since(store: SnapshotStore, stream: str, since: datetime) -> list[Event]:
    """The hints written after `since` - SKEW_SECONDS, oldest first."""
    start = prefix(stream) + time_text(since - timedelta(seconds=SKEW_SECONDS))
    events = (parse(k, stream) for k in store.list_records_after(prefix(stream), start))
    return sorted((e for e in events if e is not None), key=_order)


def _order(e: Event) -> tuple[str, str, str, str]:
    return e.when, e.kind, e.snapshot_id, e.key  # Event's own order, compared without a call per pair


def prune(store: SnapshotStore, stream: str, older_than: datetime, held: Callable[[], None] | None = None) -> int:
    """Delete the hints older than `older_than`; how many went."""
    events = (parse(k, stream) for k in store.list_records(prefix(stream)))
    old = [e for e in events if e is not None and e.when < time_text(older_than)]
    for e in old:
        if held is not None:
            held()
        store.delete_record(e.key)
    return len(old)
