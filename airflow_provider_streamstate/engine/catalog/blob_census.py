"""The blob census: which blobs live manifests reference but the store has lost.

A snapshot relies on the blobs of its parent manifest without asking the store for each
one (docs/concepts.md, writer rule 3): garbage collection cannot delete them while the
parent is live or was deleted less than the grace period ago. What the protocol cannot
rule out is a deletion outside it (by hand, a bucket lifecycle rule, a damaged copy) or
one through the narrow window retention.md leaves open. Garbage collection lists every
blob of the store anyway, so at no extra request it finds each blob a live manifest
references that is not there, and records them here:

    gc/census.json   {"format", "taken_at", "manifests", "missing": [blob id...], "missing_total"}

written by the collection holding the store's GC lease, replaced by each later one. A
snapshot reads it once (one GET) and checks, and stores again, only the parent blobs it
names. Trust needs recent evidence: with no census (no collection has listed the store),
one older than `MAX_CENSUS_AGE_SECONDS` (collections stopped running), one that names fewer
blobs than it found (`missing_total` above the cap), or one that cannot be read, the
snapshot checks every parent blob, as it did before the census existed.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime

from airflow_provider_streamstate.engine.core.errors import StreamstateError
from airflow_provider_streamstate.engine.core.manifest import is_blob_id
from airflow_provider_streamstate.engine.stores.base import SnapshotStore

log = logging.getLogger("streamstate.gc")

CENSUS_KEY = "gc/census.json"
CENSUS_FORMAT = "streamstate.blob-census/v1"
MAX_LISTED_MISSING = 10_000  # more than this and writers fall back to checking every parent blob
MAX_CENSUS_AGE_SECONDS = 7 * 86400  # older than this and writers check every parent blob


@dataclass(frozen=True)
class BlobCensus:
    """The last collection's finding: blobs referenced by live manifests that were not stored."""

    taken_at: str  # when the collection's blob listing began (ISO 8601, UTC)
    manifests: int  # live manifests whose references were counted
    missing: frozenset[str]  # blob ids (sha256 or unique), at most MAX_LISTED_MISSING of them
    missing_total: int  # how many were missing in all

    def age_seconds(self, now: datetime | None = None) -> float:
        taken = datetime.fromisoformat(self.taken_at.replace("Z", "+00:00"))
        return ((now or datetime.now(UTC)) - taken).total_seconds()

    @property
    def complete(self) -> bool:
        """Every missing blob is named (a writer may trust the parent's other blobs)."""
        return self.missing_total == len(self.missing)

    def to_json(self) -> dict[str, object]:
        return {
            "format": CENSUS_FORMAT,
            "taken_at": self.taken_at,
            "manifests": self.manifests,
            "missing": sorted(self.missing),
            "missing_total": self.missing_total,
        }


def census_of(missing: list[str], *, manifests: int, taken_at: datetime) -> BlobCensus:
    """A census naming up to MAX_LISTED_MISSING of the `missing` digests."""
    named = frozenset(sorted(missing)[:MAX_LISTED_MISSING])
    return BlobCensus(taken_at.astimezone(UTC).isoformat().replace("+00:00", "Z"), manifests, named, len(missing))


def write_census(store: SnapshotStore, census: BlobCensus) -> None:
    """Replace the store's census (only the collection holding the GC lease calls this)."""
    store.replace_record(CENSUS_KEY, json.dumps(census.to_json()).encode())


class UnreadableCensus(StreamstateError):
    """The census record is not one this engine wrote; writers then check every parent blob."""

    default_hint = "the next garbage collection replaces it"


def read_census(store: SnapshotStore) -> BlobCensus | None:
    """The store's census; None when no collection has written one (none ever deleted a
    blob either). UnreadableCensus when the record is there but not a census."""
    data = store.get_record(CENSUS_KEY)
    if data is None:
        return None
    try:
        d = json.loads(data)
        if d.get("format") != CENSUS_FORMAT:
            raise ValueError(f"format {d.get('format')!r}")
        missing = [str(x) for x in d["missing"]]
        if not all(is_blob_id(x) for x in missing):
            raise ValueError("a missing blob is not a blob id")
        census = BlobCensus(str(d["taken_at"]), int(d["manifests"]), frozenset(missing), int(d["missing_total"]))
        if census.missing_total < len(census.missing):
            raise ValueError("missing_total is below the blobs it names")
        census.age_seconds()  # taken_at must be an aware ISO time
        return census
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UnreadableCensus(f"{CENSUS_KEY} in {store.url} is unreadable ({exc})") from None


def suspect_blobs(store: SnapshotStore) -> frozenset[str] | None:
    """The blobs the store's census names as lost, or None (check every blob a writer
    inherits) when it cannot say: no census, one too old, incomplete or unreadable."""
    try:
        census = read_census(store)
    except StreamstateError as exc:  # unreadable, or the store did not answer: check instead
        log.warning("%s: checking every blob the parent snapshot references", exc.one_line())
        return None
    if census is None:
        log.info("%s has no blob census (no garbage collection has listed it): checking every blob the parent "
                 "manifest references; `streamstate gc` writes one", store.url)
        return None
    if census.age_seconds() > MAX_CENSUS_AGE_SECONDS:
        log.warning("the blob census of %s is from %s, older than %d days (is garbage collection running?): "
                    "checking every parent blob", store.url, census.taken_at, MAX_CENSUS_AGE_SECONDS // 86400)
        return None
    if not census.complete:
        log.warning("the blob census of %s (%s) found %d lost blobs and names %d: checking every parent blob",
                    store.url, census.taken_at, census.missing_total, len(census.missing))
        return None
    return census.missing
