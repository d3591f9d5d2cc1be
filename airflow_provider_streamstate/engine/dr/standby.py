"""A warm standby: a checkpoint in the DR region kept materialised from each replicated
snapshot, so that a failover writes only the files that name Kafka offsets, whatever the
size of the state.

Records beside it (in `_streamstate/`, which Spark ignores and snapshots leave out):

    standby.json                 what it holds and in which state (sidecar.STANDBY_FILE)
    standby-files/<id>.json.gz   its file list: per file, the sha256 it was verified against
                                 as it was written, its size, and the version the filesystem
                                 gave it right after (`CheckpointFS.versions`); the record
                                 names the list and its sha256

The record's `status`: `updating` (an update began: only the files of its list are known),
`current` (every file is the snapshot's, each hashed as it was written; an update writes it
last), `promoting` (a failover is rewriting its offsets), `promoted` (a failover made it the
stream's checkpoint; never updated again). A checkpoint whose record is not `promoted` is
refused by the launcher, the supervised driver and snapshots
(`sidecar.refuse_unfinished_restore`): a standby never runs before a failover.

Update (`update_standby`), incremental and crash-safe. Refused while a stream runs on the
location (its heartbeat), once promoted, and on a non-empty location that is not a standby.
A file is known-good when the list names it with the version the filesystem still gives
it; a file is written only where the snapshot wants other bytes than a known-good file
holds, and files the snapshot lacks are deleted. The `updating` record (its list: the files
that stay) comes first, then the deletes and writes (each blob hashed as it is written in
place: `Staging.write_blob`), made durable; the location is listed and compared with the
snapshot, the new list written, and `current` last. A crash anywhere leaves `updating` (or
the old `current` over untouched files): never a half-updated standby called current.

Verification before use (`check_standby`): the record is `current` for the snapshot the
failover chose; the location holds exactly the snapshot's files (names and sizes); and each
file has the sha256 the snapshot wants: taken from the list where the filesystem still
gives the file the version it had right after it was hashed (no read), else read: the
filesystem's own SHA-256 of the object where it keeps one (S3), else the bytes hashed.
`verify="full"` hashes every byte. docs/replication.md says why versions are trusted.

Promotion (`promote_standby`): `promoting`, the offset files rewritten in place (the bytes a
restore for DR writes: engine/dr/failover.py), the lineage, and `promoted` last.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from airflow_provider_streamstate.engine.catalog.snapshots import get_snapshot, resolve_snapshot
from airflow_provider_streamstate.engine.catalog.timeline import LINEAGE_FILE
from airflow_provider_streamstate.engine.checkpoint.filesystems import CheckpointFS, Staging, listing_mismatch
from airflow_provider_streamstate.engine.checkpoint.liveness import assert_not_running
from airflow_provider_streamstate.engine.checkpoint.operator_metadata import SchemaPathRewrite
from airflow_provider_streamstate.engine.checkpoint.sidecar import SIDECAR_DIR, STANDBY_FILE, Sidecar
from airflow_provider_streamstate.engine.core.cancel import CancelToken, cancellation, check_cancelled
from airflow_provider_streamstate.engine.core.digest import SHA256_RE, sha256_stream
from airflow_provider_streamstate.engine.core.errors import (
    CheckpointChanged,
    CorruptionError,
    NotFoundError,
    UnsafeManifestError,
    UsageError,
)
from airflow_provider_streamstate.engine.core.manifest import FileEntry, Manifest, safe_relative_path
from airflow_provider_streamstate.engine.core.parallel import run_parallel
from airflow_provider_streamstate.engine.core.records import dump_record, load_record
from airflow_provider_streamstate.engine.lifecycle.restore import open_target, rewritten_files
from airflow_provider_streamstate.engine.lifecycle.restore_lineage import lineage_for
from airflow_provider_streamstate.engine.stores.base import SnapshotStore

log = logging.getLogger("streamstate.standby")

FORMAT = "streamstate.standby/v1"
FILES_FORMAT = "streamstate.standby-files/v1"
FILES_DIR = f"{SIDECAR_DIR}/standby-files"
MAX_FILES_BYTES = 512 << 20  # a list of millions of files; a bigger one is refused as unreadable
STATUSES = ("updating", "current", "promoting", "promoted")
VERIFY_MODES = ("checksums", "full")


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


# --- records ----------------------------------------------------------------------------


@dataclass(frozen=True)
class StandbyRecord:
    """`_streamstate/standby.json`: what the standby holds (see the module docstring)."""

    stream: str
    store: str
    status: str
    snapshot_id: str  # held (current), being written (updating), promoted
    batch_id: int
    update_id: str  # of the update (or promotion) that wrote the record
    updated_at: str
    files: str | None = None  # its file list's name below FILES_DIR; None: nothing known
    files_sha256: str | None = None
    previous_snapshot_id: str | None = None  # held before the update
    promoted_via: str | None = None  # standby | restore
    note: str | None = None  # a promotion by restore: why the standby was not used

    def to_json(self) -> bytes:
        return dump_record(FORMAT, asdict(self))

    @classmethod
    def from_json(cls, data: bytes) -> StandbyRecord:
        """Validate an untrusted record; ValueError on anything off."""
        d = load_record(data, FORMAT, "standby record")
        fields: dict[str, Any] = {k: d.get(k) for k in cls.__dataclass_fields__}
        for k in ("stream", "store", "status", "snapshot_id", "update_id", "updated_at"):
            if not isinstance(fields[k], str) or not fields[k] or len(fields[k]) > 2048 or "\n" in fields[k]:
                raise ValueError(f"{k} is not a line of text")
        if fields["status"] not in STATUSES:
            raise ValueError(f"unknown status {fields['status']!r}")
        if not isinstance(fields["batch_id"], int) or isinstance(fields["batch_id"], bool):
            raise ValueError("batch_id is not an integer")
        name, digest = fields["files"], fields["files_sha256"]
        if name is not None and (not isinstance(name, str) or "/" in name or not name.endswith(".json.gz")
                                 or not isinstance(digest, str) or not SHA256_RE.match(digest)):
            raise ValueError("files does not name a file list with its sha256")
        for k in ("previous_snapshot_id", "promoted_via", "note"):
            if fields[k] is not None and (not isinstance(fields[k], str) or len(fields[k]) > 2048):
                raise ValueError(f"{k} is not a line of text")
        return cls(**fields)


@dataclass(frozen=True)
class Stamp:
    """A file as the standby wrote it: the sha256 it was hashed to, its size, its version."""

    sha256: str
    size: int
    version: str


def read_standby(fs: CheckpointFS) -> StandbyRecord | None:
    """The standby record at `fs`, or None when there is none; ValueError when unreadable."""
    data = fs.read_record(STANDBY_FILE)
    return None if data is None else StandbyRecord.from_json(data)


def _write_record(fs: CheckpointFS, record: StandbyRecord, *, fsync: bool) -> None:
    fs.write_record(STANDBY_FILE, record.to_json())
    if fsync:
        fs.sync([STANDBY_FILE])


def _read_files(fs: CheckpointFS, record: StandbyRecord | None) -> dict[str, Stamp]:
    """The record's file list; {} when it names none; ValueError when it is not the one named."""
    if record is None or record.files is None:
        return {}
    data = fs.read_record(f"{FILES_DIR}/{record.files}", limit=MAX_FILES_BYTES)
    if data is None or hashlib.sha256(data).hexdigest() != record.files_sha256:
        raise ValueError(f"its file list {record.files} is missing or not the one the record names")
    d = load_record(gzip.decompress(data), FILES_FORMAT, "standby file list")
    files = d.get("files")
    if not isinstance(files, dict):
        raise ValueError("its file list has no files")
    out: dict[str, Stamp] = {}
    for rel, value in files.items():
        safe_relative_path(rel)
        if (not isinstance(value, list) or len(value) != 3 or not isinstance(value[0], str)
                or not SHA256_RE.match(value[0]) or not isinstance(value[1], int) or not isinstance(value[2], str)):
            raise ValueError(f"its file list has a bad entry for {rel}")
        out[rel] = Stamp(*value)
    return out


def _write_files(fs: CheckpointFS, update_id: str, snapshot_id: str, stamps: Mapping[str, Stamp], *,
                 fsync: bool) -> tuple[str, str]:
    """A new file list (name, sha256), durable before any record names it."""
    body = dump_record(FILES_FORMAT, {"snapshot_id": snapshot_id, "files": {
        rel: [s.sha256, s.size, s.version] for rel, s in sorted(stamps.items())}})
    data = gzip.compress(body, compresslevel=1, mtime=0)
    name = f"{update_id}.json.gz"
    fs.write_record(f"{FILES_DIR}/{name}", data, content_type="application/gzip")
    if fsync:
        fs.sync([f"{FILES_DIR}/{name}"])
    return name, hashlib.sha256(data).hexdigest()


def _drop_file_lists(fs: CheckpointFS, keep: str | None) -> None:
    """File lists no record names any more (earlier updates', a crashed one's)."""
    for name in fs.record_names(FILES_DIR):
        if name != keep:
            fs.delete_record(f"{FILES_DIR}/{name}")


def _data_files(versions: Mapping[str, tuple[int, str]]) -> dict[str, tuple[int, str]]:
    """The checkpoint's own files: everything but our records beside it."""
    return {rel: v for rel, v in versions.items() if not rel.startswith(SIDECAR_DIR + "/")}


def expected_files(store: SnapshotStore, manifest: Manifest, fs: CheckpointFS) -> tuple[dict[str, FileEntry],
                                                                                          dict[str, bytes]]:
    """What a copy of `manifest` at `fs` holds: every file of the snapshot, those naming
    their own location (operator metadata v2 schema paths) as the copy's; and the bytes of
    those rewritten ones."""
    rewritten = rewritten_files(store, manifest.files, SchemaPathRewrite(fs.spark_location))
    want = {e.path: e for e in manifest.files}
    for rel, data in rewritten.items():
        want[rel] = FileEntry(rel, len(data), hashlib.sha256(data).hexdigest())
    return want, rewritten


def standby_at(fs: CheckpointFS) -> StandbyRecord | None:
    """The standby record of a location a standby is kept at or promoted from (None: new or
    empty). Refuses, in one line, a promoted standby (it is a stream's checkpoint now), an
    unreadable record, and a non-empty location that is no standby."""
    try:
        record = read_standby(fs)
    except ValueError as exc:
        raise UsageError(f"the standby record {fs.where(STANDBY_FILE)} is unreadable ({exc})",
                         hint="if the location holds nothing you need, empty it and update the standby again") from None
    if record is not None and record.status == "promoted":
        raise UsageError(
            f"the standby at {fs.location} was promoted ({record.promoted_via}, {record.updated_at}, snapshot "
            f"{record.snapshot_id}): it is the stream's checkpoint now",
            hint="start the stream on it; keep a new standby at another location",
        )
    if record is None and _data_files(fs.versions()):
        raise UsageError(f"{fs.location} is not a standby and not empty",
                         hint="give a new or empty location for the standby, or the location of an existing one")
    return record


# --- update -------------------------------------------------------------------------------


@dataclass(frozen=True)
class StandbyUpdate:
    location: str
    stream: str
    snapshot_id: str
    batch_id: int
    previous_snapshot_id: str | None
    files: int  # the snapshot's
    files_written: int
    bytes_written: int
    files_removed: int  # not in the snapshot any more
    files_kept: int  # known-good and left as they were
    seconds: float

    @property
    def unchanged(self) -> bool:
        return self.files_written == 0 and self.files_removed == 0 and self.previous_snapshot_id == self.snapshot_id

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "seconds": round(self.seconds, 3), "unchanged": self.unchanged}


def update_standby(
    store: SnapshotStore,
    stream: str,
    location: str | Path | CheckpointFS,
    *,
    snapshot: str = "latest",
    connection: Any = None,
    parallelism: int = 8,
    fsync: bool = True,
    cancel: CancelToken | None = None,
) -> StandbyUpdate:
    """Make the standby at `location` (new, empty, or a standby) hold `snapshot` (an id or
    `latest`) of `stream` in `store`, writing only the files that differ (module docstring).

    `connection` reaches a remote location (else the store's own on the same service, else
    the environment's). One update at a time per standby: a second one started meanwhile
    makes this one fail before it says `current`. `cancel` (or the enclosing `cancellation`
    block's token) stops it; the standby then stays `updating` until the next update."""
    with cancellation(cancel):
        started = time.monotonic()
        fs = open_target(location, store, connection)
        manifest = resolve_snapshot(store, stream, snapshot)
        record = standby_at(fs)
        if record is not None and record.status == "promoting":
            raise UsageError(f"a failover was promoting the standby at {fs.location} ({record.updated_at}) and did "
                             "not finish", hint="run the failover with --standby again to finish it")
        assert_not_running(Sidecar(fs), "update the standby")
        try:
            stamps = _read_files(fs, record)
        except (ValueError, UnsafeManifestError) as exc:
            log.warning("standby %s: %s; every file is written again", fs.location, exc)
            stamps = {}
        listing = _data_files(fs.versions())
        want, rewritten = expected_files(store, manifest, fs)
        kept = {rel: s for rel, s in stamps.items()
                if rel in want and listing.get(rel) == (s.size, s.version) and s.sha256 == want[rel].sha256}
        writes = [e for rel, e in sorted(want.items()) if rel not in kept]
        deletes = sorted(rel for rel in listing if rel not in kept)  # gone from the snapshot, or rewritten
        previous = None if record is None or record.status != "current" else record.snapshot_id
        if not writes and not deletes and previous == manifest.snapshot_id:
            log.info("standby %s holds %s already", fs.location, manifest.snapshot_id)
            return StandbyUpdate(fs.shared_location, stream, manifest.snapshot_id, manifest.batch_id, previous,
                                 len(want), 0, 0, 0, len(kept), time.monotonic() - started)
        update_id = f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%S%fZ')}-{uuid.uuid4().hex[:8]}"
        base = StandbyRecord(stream, store.url, "updating", manifest.snapshot_id, manifest.batch_id, update_id,
                             _now(), previous_snapshot_id=previous)
        name, digest = _write_files(fs, f"{update_id}-kept", manifest.snapshot_id, kept, fsync=fsync)
        _write_record(fs, replace(base, files=name, files_sha256=digest), fsync=fsync)
        log.info("standby %s: %s -> %s: writing %d file(s), deleting %d, keeping %d", fs.location, previous,
                 manifest.snapshot_id, len(writes), len(deletes), len(kept))

        run_parallel(fs.delete_record, deletes, parallelism)
        staging = fs.stage(fsync=fsync, direct=True)
        _write_blobs(store, staging, [e for e in writes if e.path not in rewritten], parallelism)
        for e in writes:
            if e.path in rewritten:
                staging.put(e.path, rewritten[e.path])
        if fsync:
            fs.sync([e.path for e in writes] + deletes)

        after = _data_files(fs.versions())
        _compare(fs, after, {rel: e.size for rel, e in want.items()}, "the updated standby")
        final: dict[str, Stamp] = {}
        for rel, e in want.items():
            size, version = after[rel]
            if rel in kept and (size, version) != (kept[rel].size, kept[rel].version):
                raise CheckpointChanged(f"standby {fs.location}: {rel} changed while the standby was updated",
                                        hint="another writer uses the standby's location: stop it, then update again")
            final[rel] = Stamp(e.sha256, size, version)
        name, digest = _write_files(fs, update_id, manifest.snapshot_id, final, fsync=fsync)
        check_cancelled()
        again = read_standby(fs)
        if again is None or again.update_id != update_id:
            raise CheckpointChanged(f"standby {fs.location}: another update started while this one ran",
                                    hint="run one update of a standby at a time; the next one finishes it")
        _write_record(fs, replace(base, status="current", files=name, files_sha256=digest, updated_at=_now()),
                      fsync=fsync)
        _drop_file_lists(fs, keep=name)
        result = StandbyUpdate(fs.shared_location, stream, manifest.snapshot_id, manifest.batch_id, previous,
                               len(want), len(writes), sum(e.size for e in writes),
                               sum(1 for rel in deletes if rel not in want), len(kept), time.monotonic() - started)
        log.info("standby %s holds %s: wrote %d file(s), %d bytes, removed %d, in %.2fs", fs.location,
                 manifest.snapshot_id, result.files_written, result.bytes_written, result.files_removed,
                 result.seconds)
        return result


def _write_blobs(store: SnapshotStore, staging: Staging, entries: Sequence[FileEntry], parallelism: int) -> None:
    """Every entry from its blob, fetched and verified once per blob; identical files are
    copies of the first."""
    by_blob: dict[str, list[FileEntry]] = {}
    for e in entries:
        by_blob.setdefault(e.sha256, []).append(e)

    def write(group: list[FileEntry]) -> None:
        staging.write_blob(store, group[0])
        for e in group[1:]:
            staging.copy(group[0].path, e)

    run_parallel(write, list(by_blob.values()), parallelism)


def _compare(fs: CheckpointFS, listed: Mapping[str, tuple[int, str]], want: Mapping[str, int], what: str) -> None:
    """`listed` holds exactly the wanted files (rel -> size): CorruptionError naming the first differences."""
    mismatch = listing_mismatch({rel: size for rel, (size, _) in listed.items()}, want)
    if mismatch:
        raise CorruptionError(f"{what} at {fs.location} does not match the snapshot ({mismatch.first_ones()})",
                              hint="another writer may use the location; update the standby again")


# --- verification -------------------------------------------------------------------------


@dataclass(frozen=True)
class StandbyCheck:
    """Whether the standby at `location` can be promoted for `snapshot_id`, and how it was checked."""

    location: str
    wanted: str  # the snapshot the failover chose
    held: str | None  # what the record says the standby holds (None: no readable record)
    usable: bool
    reason: str | None  # why not, in one line
    verify: str
    files: int = 0  # checked
    files_trusted: int = 0  # by the version the filesystem gave them right after they were hashed
    files_by_checksum: int = 0  # by the filesystem's stored SHA-256
    files_read: int = 0
    bytes_read: int = 0
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "seconds": round(self.seconds, 3)}


class _Mismatch(Exception):
    """A standby file that is not the snapshot's (stops the parallel check)."""


def check_standby(
    store: SnapshotStore,
    stream: str,
    fs: CheckpointFS,
    snapshot_id: str,
    *,
    verify: str = "checksums",
    skip: frozenset[str] = frozenset(),
    parallelism: int = 8,
) -> StandbyCheck:
    """Whether the standby at `fs` holds exactly snapshot `snapshot_id` of `stream`, byte for
    byte (module docstring); files in `skip` (those a promotion writes anew) only need to
    exist. Never raises for a standby that is not usable: the check says why."""
    if verify not in VERIFY_MODES:
        raise UsageError(f"unknown standby verification {verify!r}", hint="use checksums or full")
    started = time.monotonic()

    def unusable(reason: str, held: str | None = None, **counts: int) -> StandbyCheck:
        log.warning("standby %s not used: %s", fs.location, reason)
        return StandbyCheck(fs.shared_location, snapshot_id, held, False, reason, verify,
                            seconds=time.monotonic() - started, **counts)

    try:
        record = read_standby(fs)
    except ValueError as exc:
        return unusable(f"its record is unreadable ({exc})")
    if record is None:
        return unusable(f"there is no standby record at {fs.where(STANDBY_FILE)}")
    held = record.snapshot_id
    if record.status == "promoted":
        return unusable(f"it was promoted already ({record.promoted_via}, {record.updated_at})", held)
    if record.stream != stream:
        return unusable(f"it is the standby of stream {record.stream}, not {stream}", held)
    if record.status == "updating":
        return unusable(f"its update to {held} did not finish (from {record.previous_snapshot_id})", held)
    if held != snapshot_id:
        return unusable(f"stale: it holds {held} (batch {record.batch_id}), the failover chose {snapshot_id}", held)
    try:
        stamps = _read_files(fs, record)
        manifest = get_snapshot(store, stream, snapshot_id)
    except (ValueError, UnsafeManifestError, NotFoundError) as exc:
        return unusable(str(exc) if isinstance(exc, ValueError) else exc.message, held)
    want, _ = expected_files(store, manifest, fs)
    listing = _data_files(fs.versions())
    sizes = {rel: size for rel, (size, _) in listing.items()}  # a file in `skip` is written anew: any size
    mismatch = listing_mismatch(sizes, {rel: sizes.get(rel, e.size) if rel in skip else e.size
                                        for rel, e in want.items()})
    missing, extra = mismatch.missing, mismatch.unexpected
    if missing or extra:
        what = f"{missing[0]} is missing" if missing else f"{extra[0]} is not part of the snapshot"
        return unusable(f"{what} ({len(missing)} missing, {len(extra)} unexpected file(s))", held)
    if mismatch.wrong_size:
        rel = mismatch.wrong_size[0]
        return unusable(f"{rel} has {listing[rel][0]} bytes, the snapshot {want[rel].size}", held)
    counts = {"files": 0, "files_trusted": 0, "files_by_checksum": 0, "files_read": 0, "bytes_read": 0}
    to_read: list[FileEntry] = []
    for rel, e in sorted(want.items()):
        if rel in skip:
            continue
        counts["files"] += 1
        s = stamps.get(rel)
        if verify == "checksums" and s is not None and s.sha256 == e.sha256 and (s.size, s.version) == listing[rel]:
            counts["files_trusted"] += 1
        else:
            to_read.append(e)

    def check(e: FileEntry) -> tuple[int, int]:
        st = fs.stat(e.path)
        if st is None:
            raise _Mismatch(f"{e.path} vanished while it was checked")
        got = fs.stored_sha256(e.path, st) if verify == "checksums" else None
        if got is not None:
            if got != e.sha256:
                raise _Mismatch(f"{e.path}: the filesystem's SHA-256 is {got}, the snapshot's {e.sha256}")
            return 1, 0
        with fs.open_checked(e.path, st) as f:
            got, size = sha256_stream(f)
        if got != e.sha256 or size != e.size:
            raise _Mismatch(f"{e.path}: read {size} bytes with sha256 {got}, the snapshot has {e.sha256}")
        return 0, size

    try:
        done = run_parallel(check, to_read, parallelism)
    except (_Mismatch, CheckpointChanged, FileNotFoundError) as exc:
        return unusable(f"verification failed: {exc}", held, **counts)
    counts["files_by_checksum"] = sum(c for c, _ in done)
    counts["files_read"] = sum(1 for c, _ in done if not c)
    counts["bytes_read"] = sum(n for _, n in done)
    result = StandbyCheck(fs.shared_location, snapshot_id, held, True, None, verify,
                          seconds=time.monotonic() - started, **counts)
    log.info("standby %s holds %s: %d file(s) verified (%d by version, %d by stored checksum, %d read)",
             fs.location, snapshot_id, result.files, result.files_trusted, result.files_by_checksum,
             result.files_read)
    return result


# --- promotion ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Promotion:
    rewritten: tuple[str, ...]  # files written with other content than the snapshot's
    timeline: int | None
    branched: bool
    seconds: float


def promote_standby(store: SnapshotStore, manifest: Manifest, fs: CheckpointFS, rewritten: Mapping[str, bytes], *,
                    fsync: bool = True) -> Promotion:
    """Make the verified standby at `fs` (holding `manifest`) the stream's checkpoint: the
    files in `rewritten` replaced (offsets for the DR cluster), the lineage a restore would
    write, then the record `promoted`. A crash before the end leaves it `promoting`, refused
    by the launcher; a failover run again promotes it again."""
    started = time.monotonic()
    record = read_standby(fs)
    if record is None or record.status not in ("current", "promoting") or record.snapshot_id != manifest.snapshot_id:
        raise CheckpointChanged(f"the standby at {fs.location} changed since it was verified",
                                hint="run the failover again")
    assert_not_running(Sidecar(fs), "promote the standby")
    _write_record(fs, replace(record, status="promoting", updated_at=_now()), fsync=fsync)
    for rel in sorted(rewritten, key=lambda r: r.endswith(".crc")):
        check_cancelled()
        fs.write_record(rel, rewritten[rel], content_type="application/octet-stream")
    lineage = lineage_for(store, manifest, False)
    fs.write_record(LINEAGE_FILE, lineage.to_json())
    if fsync:
        fs.sync([*rewritten, LINEAGE_FILE])
    branched = lineage.stream is not None and lineage.timeline is None
    if branched:  # as a restore does, once the checkpoint is in place (a rollback: a new timeline)
        lineage = replace(lineage, timeline=lineage.branch(store))
        fs.write_record(LINEAGE_FILE, lineage.to_json())
    _write_record(fs, replace(record, status="promoted", promoted_via="standby", updated_at=_now(), files=None,
                              files_sha256=None), fsync=fsync)
    _drop_file_lists(fs, keep=None)
    log.info("standby %s promoted: %s, %d file(s) rewritten", fs.location, manifest.snapshot_id, len(rewritten))
    return Promotion(tuple(sorted(rewritten)), lineage.timeline, branched, time.monotonic() - started)


def mark_restored(fs: CheckpointFS, store: SnapshotStore, manifest: Manifest, reason: str) -> None:
    """After a failover restored `manifest` over a standby it could not use: the record
    says the location was promoted (by a restore), and why the standby was not used."""
    _write_record(fs, StandbyRecord(manifest.stream, store.url, "promoted", manifest.snapshot_id, manifest.batch_id,
                                    uuid.uuid4().hex[:12], _now(), promoted_via="restore", note=reason[:2000]),
                  fsync=True)
