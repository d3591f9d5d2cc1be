"""The catalog head: what `latest` needs, in one record read and one listing.

`latest` (and every snapshot, which finds its parent the same way) needs the newest
snapshot on the current timeline: the ids that may be it, the timeline records that say
which of them are on that history, and its manifest. Each publish on the current timeline
writes all three into one record,

    streams/<stream>/head/newest.json
        {"format", "stream", "snapshot_id", "manifest": <its stored text, or header line>,
         "manifest_md5", "timelines": {"<N>": <timeline record text>}}
    streams/<stream>/split-header/newest.json
        the header line alone, when the head carries only that (written just before it)

and a reader checks it with one listing that starts at that id (`SnapshotStore.list_from`:
on S3 one `StartAfter` page, which shows the ids at and after it and, as the names sort
after them, the split header and every timeline record). A head is a cache, never the truth:
- its snapshot counts only when the listing shows it (one deleted since is ignored), and
  every id listed after it is considered (a later or concurrent writer): the newest on a
  history among them is the newest of all, as every other id sorts before;
- a timeline record listed but not carried (or not as stored) is read, one carried but not
  listed is dropped: a rollback since the head was written is followed;
- when none of the listed ids is on the wanted history (a rollback below the head, a head
  whose snapshot is gone), every id is listed, as without a head (catalog/snapshots.py);
- an unreadable or foreign head is ignored with a warning.
A copy the head carries is used only where the listing shows the stored objects it stands
for with the copy's MD5 as their ETag (S3; an encrypted bucket's ETag is no MD5, and a local
or HDFS store gives none: there the manifest is read, which is cheap):
- a whole manifest: the manifest's ETag is the copy's MD5 (manifests are write-once);
- of a manifest larger than `MAX_EMBEDDED`, the header line only (what `latest`, and a
  snapshot of an unchanged checkpoint, read): the manifest's ETag is the MD5 the head
  recorded of it, and the split header's ETag is the copy's MD5. The split header is the
  header of the manifest with the head's id (a writer copies it from the bytes it publishes
  or reads, and the header names its snapshot, checked on reading), so the head alone binds
  nothing: a head altered, or copied from another store or stream, is not used, and the
  stored manifest is read. The file list is read from the stored manifest when first used,
  checked against the sha256 the header names, and refused when the stored header is not
  the one used (a head and a split header both rewritten by hand are caught there).
A manifest or record damaged by hand is read and reported, never taken for the stored one.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass

from airflow_provider_streamstate.engine.catalog.manifests import read_manifest
from airflow_provider_streamstate.engine.catalog.timeline import (
    TimelineRecord,
    Timelines,
    read_timeline_records,
    timeline_key,
)
from airflow_provider_streamstate.engine.core.errors import StreamstateError, UnsafeManifestError
from airflow_provider_streamstate.engine.core.manifest import FORMAT as MANIFEST_FORMAT
from airflow_provider_streamstate.engine.core.manifest import Manifest, SnapshotRef, validate_snapshot_id
from airflow_provider_streamstate.engine.core.records import dump_record, load_record
from airflow_provider_streamstate.engine.stores.base import RecentListing, SnapshotStore, record_key

log = logging.getLogger("streamstate.catalog")

HEAD_FORMAT = "streamstate.catalog-head/v1"
HEAD_KIND = "head"
# Sorts between `snapshots` and `timelines`: the listing from the head's id shows it.
SPLIT_HEADER_KIND = "split-header"
MAX_EMBEDDED = 256 << 10  # a delta manifest is far smaller; of a large full one, the header only


def head_key(stream: str) -> str:
    return record_key(stream, HEAD_KIND, "newest")


def split_header_key(stream: str) -> str:
    return record_key(stream, SPLIT_HEADER_KIND, "newest")


@dataclass(frozen=True)
class HeadView:
    """What a head and the listing from its snapshot on say: the ids at and after it (the
    head's own only if it is still there), the stream's timelines when the listing showed
    every record, and the head's manifest when it is among the ids and was carried."""

    refs: list[SnapshotRef]
    timelines: Timelines
    manifest: Manifest | None


def write_head(store: SnapshotStore, stream: str, manifest: Manifest, data: bytes, timelines: Timelines) -> None:
    """Record `manifest` (stored as `data`) as the newest snapshot of `stream`, with the
    timeline records the writer knew; a failure only costs readers requests."""
    header = data.split(b"\n", 1)[0] if manifest.format == MANIFEST_FORMAT else b""  # v3: a header line, a file list
    whole = len(data) <= MAX_EMBEDDED
    carried = data if whole else header if 0 < len(header) <= MAX_EMBEDDED else None
    if carried is not None and not carried.isascii():
        carried = None
    body = dump_record(HEAD_FORMAT, {
        "stream": stream, "snapshot_id": manifest.snapshot_id,
        "manifest": carried.decode() if carried is not None else None,
        "manifest_md5": _md5(data),
        "timelines": {str(n): rec.to_json().decode() for n, rec in sorted(timelines.records.items())},
    })
    try:
        if carried is not None and not whole:
            store.replace_record(split_header_key(stream), header)
        store.replace_record(head_key(stream), body)
    except (StreamstateError, OSError) as exc:
        why = exc.one_line() if isinstance(exc, StreamstateError) else str(exc) or type(exc).__name__
        log.warning("could not update the catalog head of %s in %s: %s", stream, store.url, why)


def read_head_view(store: SnapshotStore, stream: str) -> HeadView | None:
    """The head checked by one listing from its snapshot on; None when there is no usable head."""
    data = store.get_record(head_key(stream))
    if data is None:
        return None
    try:
        d = load_record(data, HEAD_FORMAT, "catalog head")
        if d.get("stream") != stream:
            raise ValueError(f"it is stream {d.get('stream')!r}'s")
        newest = validate_snapshot_id(str(d["snapshot_id"]))
        carried: tuple[str, str] | None = None  # the manifest (or its header), the stored bytes' MD5
        if d.get("manifest") is not None:
            carried = (d["manifest"], d["manifest_md5"])
            if not all(isinstance(v, str) for v in carried):
                raise ValueError("its manifest is not text with an MD5")
        records = {int(n): str(text).encode() for n, text in dict(d.get("timelines") or {}).items()}
    except (ValueError, KeyError, TypeError, StreamstateError) as exc:
        why = exc.one_line() if isinstance(exc, StreamstateError) else str(exc)
        log.warning("ignoring the unreadable catalog head of %s in %s: %s", stream, store.url, why)
        return None
    listing = store.list_from(stream, newest)
    refs = []
    for sid in listing.snapshot_ids:
        try:
            refs.append(SnapshotRef.parse(sid))
        except StreamstateError:
            log.warning("ignoring a manifest with an invalid id %r in stream %s", sid, stream)
    # A carried record stands for the stored one only when the listing's ETag is its MD5;
    # others (one started since the head was written: a rollback; a store that gives no ETag)
    # are read.
    verified = {n: TimelineRecord.from_json(text, expect=n) for n, text in records.items()
                if _md5(text) == listing.etags.get(timeline_key(stream, n))}
    known = read_timeline_records(store, stream, listing.timeline_keys, verified)
    timelines = Timelines(known, max([1, *known, *(r.timeline for r in refs)]))
    manifest = None
    copy = None if carried is None or newest not in listing.snapshot_ids else _as_listed(
        *carried, listing, newest, split_header_key(stream))
    if copy is not None:
        def file_list() -> bytes:  # of a manifest too large to carry: its header only is
            stored = store.get_manifest(stream, newest)
            line1, _, rest = stored.partition(b"\n")
            if line1 != copy:
                raise UnsafeManifestError(f"manifest {newest} of {stream} is not the one its catalog head names")
            return rest[:-1] if rest.endswith(b"\n") else rest
        try:
            manifest = read_manifest(store, stream, newest, copy, file_list=file_list)
        except UnsafeManifestError as exc:  # read from the store instead, where it is checked again
            log.warning("ignoring the catalog head's copy of a manifest: %s", exc.one_line())
    return HeadView(sorted(refs), timelines, manifest)


def _md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def _as_listed(text: str, md5: str, listing: RecentListing, snapshot_id: str, split_header: str) -> bytes | None:
    """The head's copy of the manifest when the listing shows it is the stored one (None
    when not): the manifest's ETag is the MD5 the head recorded, and the copy is either those
    bytes, or their header line alone with the split header's ETag its MD5. Where the listing
    gives no ETag (local, HDFS: a read there is cheap), or not an MD5 (an encrypted bucket),
    the copy is not used: a manifest damaged since it was published is read and reported,
    never hidden."""
    data = text.encode()
    if listing.etags.get(snapshot_id) != md5:
        return None
    if _md5(data) == md5:
        return data  # the whole manifest
    if b"\n" not in data and listing.etags.get(split_header) == _md5(data):
        return data  # its header line, as the split header stored beside it
    return None
