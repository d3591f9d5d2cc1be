"""The snapshot manifest: what a snapshot is, as versioned JSON.

A manifest is the only thing that makes a snapshot visible, and it is untrusted input
when read back: `Manifest.from_json` validates every field and every path before any
caller can act on it (a restore must never write outside its target).

Format v3 (docs/manifest.md) is two JSON lines: a header (what the snapshot is, its totals,
the sha256 of the second line, and for a delta the manifests it builds on) and the file
list. A *full* manifest lists every file; a *delta* lists only what changed since its
parent and names, by the sha256 of their headers, every manifest back to the full one it
builds on (at most `MAX_CHAIN`), so that a reader fetches the whole chain at once. Reading
a header never parses the file list: `Manifest.files` is read (and, for a delta, resolved
through the chain) when first used, and is the whole file list whatever the stored form.
Formats v1 and v2 (one JSON document, every file) are still read.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from airflow_provider_streamstate.engine.core.digest import SHA256_RE
from airflow_provider_streamstate.engine.core.errors import (
    BrokenChainError,
    NotFoundError,
    UnsafeManifestError,
    UsageError,
)
from airflow_provider_streamstate.engine.core.file_list import FileList, ResolvedLists
from airflow_provider_streamstate.engine.core.manifest_fields import (
    MAX_BATCH_ID,
    STREAM_NAME_RE,
    Fields,
    OperatorInfo,
)
from airflow_provider_streamstate.engine.core.parallel import run_parallel

FORMAT = "streamstate.manifest/v3"  # what is written: a header line, then the file list
FORMAT_V2 = "streamstate.manifest/v2"  # one document listing every file
FORMAT_V1 = "streamstate.manifest/v1"  # no timeline: read as timeline 1
FORMATS = (FORMAT, FORMAT_V2, FORMAT_V1)
# Timeline 1 ids carry no suffix (so every v1 id is a valid timeline-1 id); later ones `-t<N>`.
SNAPSHOT_ID_RE = re.compile(r"^(\d{12})-(\d{8}T\d{12}Z)(?:-t([2-9]|[1-9]\d{1,8}))?$")
LABEL_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$")
MAX_TIMELINE = 10**9 - 1
STATE_STORES = ("hdfs", "rocksdb", "rocksdb-changelog", "none")
# A blob stored under a unique key (not its content's sha256): 128 random bits, hex.
UNIQUE_BLOB_RE = re.compile(r"^[0-9a-f]{32}$")
# A delta names at most this many manifests it builds on: every MAX_CHAIN + 1-th snapshot
# of a line is full, so no read fetches more than MAX_CHAIN + 1 manifests.
MAX_CHAIN = 16
# ... and a full one is written once the chain's changes outnumber half the files (plus this):
# resolving a delta never costs much more than reading a full manifest.
DELTA_SLACK = 64
RESOLVED_LISTS_KEPT = 2  # whole file lists remembered, by header sha256 (a 100,000-file list is ~30 MB)


_NOT_PLAIN = re.compile(r"[\x00-\x1f\\]")  # control characters, backslashes
_DRIVE = re.compile(r"^[A-Za-z]:")
_ODD_SEGMENT = re.compile(r"(^|/)(\.{1,2})?(/|$)")  # an empty, `.` or `..` segment


def is_blob_id(value: object) -> bool:
    """A blob's id: its content's sha256 (content-addressed) or a unique id (32 hex digits)."""
    return isinstance(value, str) and bool(SHA256_RE.match(value) or UNIQUE_BLOB_RE.match(value))


def validate_stream_name(name: str) -> str:
    if not STREAM_NAME_RE.match(name or ""):
        raise UsageError(
            f"invalid stream name {name!r}",
            hint="use 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit",
        )
    return name


def validate_snapshot_id(snapshot_id: str) -> str:
    if not SNAPSHOT_ID_RE.match(snapshot_id or ""):
        raise UsageError(
            f"invalid snapshot id {snapshot_id!r}",
            hint="snapshot ids look like 000000000042-20261121T101500123456Z; see `streamstate snapshot list`",
        )
    return snapshot_id


def new_snapshot_id(batch_id: int, now: datetime | None = None, timeline: int = 1) -> str:
    """`<batch, 12 digits>-<UTC time to the microsecond>Z[-t<timeline>]`.

    The id alone tells batch, creation time and timeline, so a store listing is enough to
    find the newest snapshot of a timeline without reading manifests.
    """
    if not 0 <= batch_id <= MAX_BATCH_ID:
        raise UsageError(f"batch id {batch_id} out of range")
    if not 1 <= timeline <= MAX_TIMELINE:
        raise UsageError(f"timeline {timeline} out of range")
    now = now or datetime.now(UTC)
    suffix = f"-t{timeline}" if timeline > 1 else ""
    return f"{batch_id:012d}-{now.strftime('%Y%m%dT%H%M%S%f')}Z{suffix}"


@dataclass(frozen=True, order=True)
class SnapshotRef:
    """What a snapshot id says: batch, creation time (sortable text) and timeline."""

    created: str  # YYYYMMDDTHHMMSSffffffZ: sorts as time
    batch_id: int
    timeline: int
    snapshot_id: str

    @classmethod
    def parse(cls, snapshot_id: str) -> SnapshotRef:
        m = SNAPSHOT_ID_RE.match(validate_snapshot_id(snapshot_id))
        assert m is not None
        return cls(m.group(2), int(m.group(1)), int(m.group(3) or 1), snapshot_id)


def safe_relative_path(path: object) -> str:
    """Return `path` if it is a normalised relative POSIX path that stays below its root.

    Rejects absolute paths, `..`, `.`, empty segments, backslashes, NUL and control
    characters, so that `os.path.join(target, path)` can never escape `target`.
    """
    if not isinstance(path, str) or not path:
        raise UnsafeManifestError(f"manifest has an empty or non-string file path: {path!r}")
    if path[0] == "/" or _NOT_PLAIN.search(path) or _DRIVE.match(path):
        raise UnsafeManifestError(f"manifest path {path!r} is not a plain relative path")
    if _ODD_SEGMENT.search(path) or posixpath.normpath(path) != path:
        raise UnsafeManifestError(f"manifest path {path!r} is not normalised or escapes the target")
    return path



@dataclass(frozen=True)
class FileEntry:
    """One checkpoint file: where it goes, how big it is, its content's sha256, and the blob
    holding it when that is not the blob named by the sha256 (a unique key: `blob`)."""

    path: str
    size: int
    sha256: str
    mtime_ns: int = 0  # of the source file when read: lets the next snapshot reuse the hash
    blob: str | None = None  # a unique blob id; None: the content-addressed blob `sha256`

    @property
    def blob_id(self) -> str:
        """The id of the blob that holds this file's bytes (what stores are asked for)."""
        return self.blob or self.sha256

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"path": self.path, "size": self.size, "sha256": self.sha256, "mtime_ns": self.mtime_ns}
        if self.blob is not None:
            d["blob"] = self.blob
        return d

    @classmethod
    def from_dict(cls, d: Any) -> FileEntry:
        if not isinstance(d, dict):
            raise UnsafeManifestError("manifest file entry is not an object")
        path = safe_relative_path(d.get("path"))
        size, sha, mtime, blob = d.get("size"), d.get("sha256"), d.get("mtime_ns", 0), d.get("blob")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise UnsafeManifestError(f"manifest entry {path!r} has an invalid size {size!r}")
        if not isinstance(sha, str) or not SHA256_RE.match(sha):
            raise UnsafeManifestError(f"manifest entry {path!r} has an invalid sha256 {sha!r}")
        if not isinstance(mtime, int) or isinstance(mtime, bool):
            raise UnsafeManifestError(f"manifest entry {path!r} has an invalid mtime_ns {mtime!r}")
        if blob is not None and (not isinstance(blob, str) or not UNIQUE_BLOB_RE.match(blob)):
            raise UnsafeManifestError(f"manifest entry {path!r} has an invalid blob id {blob!r}")
        return cls(path, size, sha, mtime, blob)


@dataclass(frozen=True)
class Totals:
    """A snapshot's file count, bytes and distinct blobs (of the whole file list)."""

    files: int
    bytes: int
    blobs: int

    @classmethod
    def of(cls, files: Sequence[FileEntry]) -> Totals:
        return cls(len(files), sum(f.size for f in files), len({f.blob_id for f in files}))

    def to_json(self) -> dict[str, int]:
        return {"files": self.files, "bytes": self.bytes, "blobs": self.blobs}


@dataclass(frozen=True)
class ChainLink:
    """A manifest a delta builds on: its id and the sha256 of its header line (which names
    the sha256 of its file list, so the link pins the whole manifest)."""

    snapshot_id: str
    sha256: str


@dataclass(frozen=True)
class Delta:
    """How a v3 delta stores its files: the manifests it builds on (the full one first, its
    parent last) and what changed since the parent's file list."""

    chain: tuple[ChainLink, ...]
    changed: Sequence[FileEntry]  # added or different since the parent, by path
    removed: Sequence[str]  # paths of the parent's list that are gone
    chain_entries: int  # changed + removed over every delta of the chain, this one included

    @property
    def parent(self) -> ChainLink:
        return self.chain[-1]


def plan_delta(parent: Manifest | None, files: Sequence[FileEntry]) -> Delta | None:
    """How to store a manifest of `files` whose parent is `parent`: a delta of it, or None
    for a full manifest (no v3 parent, a chain at MAX_CHAIN, or changes outnumbering half
    the files). Reads the parent's whole file list."""
    if parent is None or parent.stored_sha256 is None:
        return None
    chain = (*(parent.delta.chain if parent.delta else ()), ChainLink(parent.snapshot_id, parent.stored_sha256))
    if len(chain) > MAX_CHAIN:
        return None
    before = {e.path: e for e in parent.files}
    changed = [e for e in files if before.get(e.path) != e]
    now = {e.path for e in files}
    removed = sorted(p for p in before if p not in now)
    entries = (parent.delta.chain_entries if parent.delta else 0) + len(changed) + len(removed)
    if entries > len(files) // 2 + DELTA_SLACK:
        return None
    return Delta(chain, changed, removed, entries)


def unchanged_delta(parent: Manifest) -> Delta | None:
    """A delta of `parent` with nothing changed (None: write a full manifest instead), built
    from its header alone: its file list is not read."""
    if parent.stored_sha256 is None:
        return None
    chain = (*(parent.delta.chain if parent.delta else ()), ChainLink(parent.snapshot_id, parent.stored_sha256))
    if len(chain) > MAX_CHAIN:
        return None
    return Delta(chain, (), (), parent.delta.chain_entries if parent.delta else 0)


_RESOLVED: ResolvedLists[FileEntry] = ResolvedLists(RESOLVED_LISTS_KEPT)


def _check_paths(entries: Sequence[FileEntry], sid: str) -> None:
    """Each path listed once, and never both a file and a directory."""
    seen: set[str] = set()
    for e in entries:
        if e.path in seen:
            raise UnsafeManifestError(f"manifest {sid} lists {e.path!r} twice")
        seen.add(e.path)
    dirs = {posixpath.dirname(p) for p in seen}
    checked: set[str] = set()
    for p in dirs:
        while p and p not in checked:
            if p in seen:
                raise UnsafeManifestError(f"manifest {sid} uses {p!r} as both a file and a directory")
            checked.add(p)
            p = posixpath.dirname(p)


class _Body:
    """A v3 manifest's second line, parsed and checked against its header on first use."""

    def __init__(self, raw: bytes | memoryview | Callable[[], bytes], sha256: str, sid: str, delta: bool) -> None:
        self.raw, self.sha256, self.sid, self.delta = raw, sha256, sid, delta  # raw: the line, or how to read it
        self._parsed: tuple[list[FileEntry], list[str]] | None = None
        self._lock = threading.Lock()

    def parsed(self) -> tuple[list[FileEntry], list[str]]:
        with self._lock:
            if self._parsed is None:
                self._parsed = self._parse()
                self.raw = b""
            return self._parsed

    def _parse(self) -> tuple[list[FileEntry], list[str]]:
        if callable(self.raw):
            self.raw = self.raw()
        if hashlib.sha256(self.raw).hexdigest() != self.sha256:
            raise UnsafeManifestError(f"manifest {self.sid}: its file list does not match the sha256 its header names")
        try:
            d = json.loads(bytes(self.raw))
        except (ValueError, UnicodeDecodeError) as exc:
            raise UnsafeManifestError(f"manifest {self.sid}: its file list is not valid JSON: {exc}") from None
        if not isinstance(d, dict) or not isinstance(d.get("files"), list):
            raise UnsafeManifestError(f"manifest {self.sid} has no file list")
        files = [FileEntry.from_dict(e) for e in d["files"]]
        removed = d.get("removed", [])
        if not self.delta and removed:
            raise UnsafeManifestError(f"manifest {self.sid} is full but removes files")
        if not isinstance(removed, list):
            raise UnsafeManifestError(f"manifest {self.sid} has an invalid list of removed files")
        removed = [safe_relative_path(p) for p in removed]
        if len(set(removed)) != len(removed) or set(removed) & {e.path for e in files}:
            raise UnsafeManifestError(f"manifest {self.sid} removes a path twice, or one it also lists")
        _check_paths(files, self.sid)
        return files, removed


Fetch = Callable[[str], bytes]  # another manifest of the same stream, by id (NotFoundError: gone)


@dataclass(frozen=True)
class Manifest:
    snapshot_id: str
    stream: str
    batch_id: int
    created_at: str
    query_id: str
    kafka_offsets: dict[str, dict[str, int]]
    sources: list[dict[str, Any]]
    watermark_ms: int | None
    next_watermark_ms: int | None
    batch_timestamp_ms: int | None
    state_store: str  # hdfs | rocksdb | rocksdb-changelog | none
    operators: list[OperatorInfo]
    spark_conf: dict[str, str]
    files: Sequence[FileEntry]  # every file of the snapshot, whatever the stored form (read on first use)
    parent: str | None
    spark_version: str | None
    labels: dict[str, str] = field(default_factory=dict)
    checkpoint: str = ""
    created_by: str = ""
    timeline: int = 1  # the line of history it belongs to; a rollback starts a new one
    # Per topic: partition count and the last record batch N consumed in each partition, read
    # from the primary cluster when the snapshot was taken (anchors.py); None: not recorded.
    kafka_anchors: dict[str, Any] | None = None
    # Spark's state checkpoint format (spark.sql.streaming.stateStore.checkpointFormatVersion):
    # 2 names RocksDB state files by unique id; a restored copy must run with the same.
    checkpoint_format: int = 1
    format: str = FORMAT
    # How it is (or is to be) stored: a delta of its parent, or None for a full manifest.
    delta: Delta | None = None
    # The sha256 of its stored header line (v3, as read or written): what a delta links to.
    stored_sha256: str | None = field(default=None, compare=False, repr=False)
    # The totals its header declares (read without the file list; checked when it is read).
    declared_totals: Totals | None = field(default=None, compare=False, repr=False)

    @property
    def totals(self) -> Totals:
        """Files, bytes and blobs of the whole file list (from the header when it says)."""
        if self.declared_totals is not None:
            return self.declared_totals
        return Totals.of(self.files)

    @property
    def bytes_total(self) -> int:
        return self.totals.bytes

    @property
    def blobs(self) -> dict[str, int]:
        """Distinct blobs this snapshot references (by blob id), with their sizes."""
        return {f.blob_id: f.size for f in self.files}

    @property
    def blob_sha256(self) -> dict[str, str]:
        """The sha256 of each blob's content, by blob id."""
        return {f.blob_id: f.sha256 for f in self.files}

    @property
    def own_files(self) -> Sequence[FileEntry]:
        """The entries this manifest itself lists: every file (full), or the changed ones
        (delta). Garbage collection marks these: the rest are listed by the manifests of
        the chain, which stay as long as the delta does (docs/concepts.md)."""
        return self.delta.changed if self.delta is not None else self.files

    @property
    def chain_ids(self) -> list[str]:
        """Ids of the manifests this one builds on (none for a full manifest)."""
        return [link.snapshot_id for link in self.delta.chain] if self.delta is not None else []

    # --- writing -----------------------------------------------------------------------

    def _header(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "format": FORMAT, "snapshot_id": self.snapshot_id, "stream": self.stream, "batch_id": self.batch_id,
            "created_at": self.created_at, "query_id": self.query_id, "kafka_offsets": self.kafka_offsets,
            "sources": self.sources, "watermark_ms": self.watermark_ms, "next_watermark_ms": self.next_watermark_ms,
            "batch_timestamp_ms": self.batch_timestamp_ms, "state_store": self.state_store,
            "operators": [op.to_json() for op in self.operators], "spark_conf": self.spark_conf,
            "parent": self.parent, "spark_version": self.spark_version, "labels": self.labels,
            "checkpoint": self.checkpoint, "created_by": self.created_by, "timeline": self.timeline,
        }
        if self.kafka_anchors is not None:
            d["kafka_anchors"] = self.kafka_anchors
        if self.checkpoint_format != 1:
            d["checkpoint_format"] = self.checkpoint_format
        d["totals"] = self.totals.to_json()
        return d

    def to_dict(self) -> dict[str, Any]:
        """The whole snapshot as one document (the header and every file): what `snapshot
        show --json` prints, whatever the stored form."""
        return {**self._header(), "files": [e.to_dict() for e in self.files]}

    def stored(self) -> tuple[bytes, str]:
        """The bytes to store (v3: header line, file-list line) and the sha256 of the header
        line (what a delta of this manifest links to)."""
        body: dict[str, Any] = {"files": [e.to_dict() for e in self.own_files]}
        if self.delta is not None:
            body["removed"] = list(self.delta.removed)
        line2 = json.dumps(body, separators=(",", ":")).encode()
        header = self._header()
        header["files_sha256"] = hashlib.sha256(line2).hexdigest()
        header["delta"] = None if self.delta is None else {
            "chain": [[link.snapshot_id, link.sha256] for link in self.delta.chain],
            "chain_entries": self.delta.chain_entries,
        }
        line1 = json.dumps(header, separators=(",", ":")).encode()
        return line1 + b"\n" + line2 + b"\n", hashlib.sha256(line1).hexdigest()

    def to_json(self) -> bytes:
        return self.stored()[0]

    def remember_files(self, header_sha256: str) -> None:
        """Keep this manifest's whole file list (already read) for deltas that build on it."""
        if isinstance(self.files, FileList) and not self.files.loaded:
            return
        _RESOLVED.put(header_sha256, list(self.files))

    # --- reading -----------------------------------------------------------------------

    @classmethod
    def from_json(cls, data: bytes, *, expect_stream: str | None = None, expect_id: str | None = None,
                  fetch: Fetch | None = None, file_list: Callable[[], bytes] | None = None) -> Manifest:
        """Parse and validate an untrusted manifest's header; raise UnsafeManifestError on
        anything off. The file list is read and validated when first used: a full one from
        these bytes, a delta's through `fetch` (the manifests it builds on, each checked
        against the sha256 the delta names; BrokenChainError when one is gone). `data` may be
        a v3 header line alone, with `file_list` reading its second line when first used
        (checked against the header's sha256 like any)."""
        end = data.find(b"\n")
        line1 = data if end < 0 else data[:end]
        try:
            head = json.loads(line1)
        except (ValueError, UnicodeDecodeError):
            head = None
        if isinstance(head, dict) and head.get("format") == FORMAT:
            # The file list stays unparsed, and uncopied, until it is used.
            line2 = memoryview(data)[len(line1) + 1: len(data) - 1 if data.endswith(b"\n") else len(data)]
            body = file_list if file_list is not None and not len(line2) else line2
            return cls._from_v3(head, hashlib.sha256(line1).hexdigest(), body, expect_stream, expect_id, fetch)
        try:
            d = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise UnsafeManifestError(f"manifest is not valid JSON: {exc}") from None
        if not isinstance(d, dict):
            raise UnsafeManifestError("manifest is not a JSON object")
        if d.get("format") not in (FORMAT_V2, FORMAT_V1):
            raise UnsafeManifestError(
                f"manifest format {d.get('format')!r} is not one of {', '.join(FORMATS)}",
                hint="upgrade streamstate to read snapshots written by a newer version",
            )
        common = _common_fields(d, expect_stream, expect_id)
        raw_files = d.get("files")
        if not isinstance(raw_files, list):
            raise UnsafeManifestError(f"manifest {common['snapshot_id']} has no file list")
        files = [FileEntry.from_dict(e) for e in raw_files]
        if any(e.blob is not None for e in files):
            raise UnsafeManifestError(f"manifest {common['snapshot_id']} ({d['format']}) names blobs by unique id")
        _check_paths(files, common["snapshot_id"])
        return cls(files=files, format=d["format"], **common)

    @classmethod
    def _from_v3(cls, head: dict[str, Any], header_sha: str, raw_body: bytes | memoryview | Callable[[], bytes],
                 expect_stream: str | None,
                 expect_id: str | None, fetch: Fetch | None) -> Manifest:
        common = _common_fields(head, expect_stream, expect_id)
        sid, f = common["snapshot_id"], Fields(head, common["snapshot_id"])
        files_sha = head.get("files_sha256")
        if not isinstance(files_sha, str) or not SHA256_RE.match(files_sha):
            raise UnsafeManifestError(f"manifest {sid} has an invalid files_sha256 {files_sha!r}")
        raw_totals = head.get("totals")
        if not isinstance(raw_totals, dict):
            raise UnsafeManifestError(f"manifest {sid} has no totals")
        totals = Totals(*(f.integer("totals", 0, 2**62, value=raw_totals.get(k)) for k in ("files", "bytes", "blobs")))
        chain, chain_entries = _chain(head.get("delta"), sid)
        body = _Body(raw_body, files_sha, sid, delta=bool(chain))
        if not chain:
            def full() -> list[FileEntry]:
                cached = _RESOLVED.get(header_sha)
                if cached is not None:
                    return cached
                entries = body.parsed()[0]
                _check_totals(entries, totals, sid)
                _RESOLVED.put(header_sha, entries)
                return entries
            return cls(files=FileList(loader=full), stored_sha256=header_sha, declared_totals=totals, **common)
        delta = Delta(chain, FileList(loader=lambda: body.parsed()[0]), FileList(loader=lambda: body.parsed()[1]),
                      chain_entries)
        stream = common["stream"]

        def resolve() -> list[FileEntry]:
            if fetch is None:
                raise UnsafeManifestError(f"manifest {sid} of {stream} is a delta: read it through its store",
                                          hint="use catalog.snapshots.get_snapshot, which reads what it builds on")
            return _resolve(sid, stream, header_sha, delta, totals, fetch)
        return cls(files=FileList(loader=resolve), delta=delta, stored_sha256=header_sha, declared_totals=totals,
                   **common)


def _common_fields(d: dict[str, Any], expect_stream: str | None, expect_id: str | None) -> dict[str, Any]:
    """The header fields every format shares, validated (identity first)."""
    try:
        snapshot_id = validate_snapshot_id(d["snapshot_id"])
        stream = validate_stream_name(d["stream"])
    except (KeyError, UsageError) as exc:
        raise UnsafeManifestError(f"manifest has an invalid identity: {exc}") from None
    if expect_stream is not None and stream != expect_stream:
        raise UnsafeManifestError(f"manifest {snapshot_id} belongs to stream {stream!r}, not {expect_stream!r}")
    if expect_id is not None and snapshot_id != expect_id:
        raise UnsafeManifestError(f"manifest stored as {expect_id} claims to be {snapshot_id}")
    ref = SnapshotRef.parse(snapshot_id)
    f = Fields(d, snapshot_id)
    batch_id = f.integer("batch_id", 0, MAX_BATCH_ID)
    if ref.batch_id != batch_id:
        raise UnsafeManifestError(f"manifest {snapshot_id} records batch {batch_id}, its id says otherwise")
    # v1 manifests predate timelines: everything they describe is timeline 1.
    timeline = f.integer("timeline", 1, MAX_TIMELINE) if d["format"] != FORMAT_V1 else 1
    if ref.timeline != timeline:
        raise UnsafeManifestError(f"manifest {snapshot_id} records timeline {timeline}, its id says otherwise")
    parent = f.optional_str("parent")
    if parent is not None:
        try:
            validate_snapshot_id(parent)
        except UsageError:
            raise UnsafeManifestError(f"manifest {snapshot_id} has an invalid parent {parent!r}") from None
    state_store = f.string("state_store", default="none")
    if state_store not in STATE_STORES:
        raise UnsafeManifestError(f"manifest {snapshot_id} has an unknown state_store {state_store!r}")
    labels = f.str_map("labels")
    for key in labels:
        if not LABEL_KEY_RE.match(key):
            raise UnsafeManifestError(f"manifest {snapshot_id} has an invalid label key {key!r}")
    return {
        "snapshot_id": snapshot_id, "stream": stream, "batch_id": batch_id, "created_at": f.timestamp("created_at"),
        "query_id": f.string("query_id", default=""), "kafka_offsets": f.kafka_offsets("kafka_offsets"),
        "sources": f.sources("sources"), "watermark_ms": f.optional_int("watermark_ms"),
        "next_watermark_ms": f.optional_int("next_watermark_ms"),
        "batch_timestamp_ms": f.optional_int("batch_timestamp_ms"), "state_store": state_store,
        "operators": f.operators("operators"), "spark_conf": f.str_map("spark_conf"), "parent": parent,
        "spark_version": f.optional_str("spark_version"), "labels": labels,
        "checkpoint": f.string("checkpoint", default=""), "created_by": f.string("created_by", default=""),
        "timeline": timeline, "kafka_anchors": f.anchors("kafka_anchors"),
        "checkpoint_format": f.integer("checkpoint_format", 1, 2) if "checkpoint_format" in d else 1,
    }


def _chain(raw: Any, sid: str) -> tuple[tuple[ChainLink, ...], int]:
    """A v3 header's `delta` (null for a full manifest): its chain of links and count."""
    if raw is None:
        return (), 0
    if not isinstance(raw, dict) or not isinstance(raw.get("chain"), list) or not 1 <= len(raw["chain"]) <= MAX_CHAIN:
        raise UnsafeManifestError(f"manifest {sid} has an invalid delta: a chain of 1..{MAX_CHAIN} manifests is needed")
    links = []
    for item in raw["chain"]:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[1], str) and SHA256_RE.match(item[1])):
            raise UnsafeManifestError(f"manifest {sid} has an invalid delta link {item!r}")
        try:
            links.append(ChainLink(validate_snapshot_id(item[0]), item[1]))
        except UsageError:
            raise UnsafeManifestError(f"manifest {sid} has an invalid delta link {item!r}") from None
    ids = [link.snapshot_id for link in links]
    if len(set(ids)) != len(ids) or sid in ids:
        raise UnsafeManifestError(f"manifest {sid} names a manifest twice in its delta chain")
    entries = raw.get("chain_entries")
    if not isinstance(entries, int) or isinstance(entries, bool) or entries < 0:
        raise UnsafeManifestError(f"manifest {sid} has an invalid chain_entries {entries!r}")
    return tuple(links), entries


def _check_totals(entries: Sequence[FileEntry], declared: Totals, sid: str) -> None:
    actual = Totals.of(entries)
    if actual != declared:
        raise UnsafeManifestError(f"manifest {sid} declares {declared.to_json()}, its files add up to {actual.to_json()}")


def _resolve(sid: str, stream: str, header_sha: str, delta: Delta, totals: Totals, fetch: Fetch) -> list[FileEntry]:
    """A delta's whole file list: the full manifest it builds on, each delta after it in
    order, then its own changes. Each manifest fetched must be the one the chain names (the
    sha256 of its header), and builds on exactly the links before it. Lists already read
    (by header sha256) are not fetched again."""
    cached = _RESOLVED.get(header_sha)
    if cached is not None:
        return cached
    chain = delta.chain
    current: dict[str, FileEntry] | None = None
    start = 0
    for i in range(len(chain) - 1, -1, -1):
        hit = _RESOLVED.get(chain[i].sha256)
        if hit is not None:
            current, start = {e.path: e for e in hit}, i + 1
            break

    def member(i: int) -> Manifest:
        link = chain[i]
        try:
            data = fetch(link.snapshot_id)
        except NotFoundError as exc:
            raise BrokenChainError(
                f"snapshot {sid} of {stream} cannot be read: it builds on manifest {link.snapshot_id}, which is "
                f"missing ({exc.message})") from None
        m = Manifest.from_json(data, expect_stream=stream, expect_id=link.snapshot_id)
        if m.stored_sha256 != link.sha256:
            raise UnsafeManifestError(
                f"snapshot {sid} of {stream} builds on manifest {link.snapshot_id} with header sha256 "
                f"{link.sha256[:12]}, but the store holds another one ({(m.stored_sha256 or m.format)[:12]})")
        expected = chain[:i]
        if (m.delta.chain if m.delta is not None else ()) != expected:
            raise UnsafeManifestError(f"manifest {link.snapshot_id} does not build on what snapshot {sid} says it does")
        return m

    members = run_parallel(member, list(range(start, len(chain))), 8)
    for m in members:
        if m.delta is None:
            current = {e.path: e for e in m.files}
        else:
            assert current is not None  # chain[0] is full (checked: its chain is empty)
            _apply(current, m.delta, m.snapshot_id)
    assert current is not None
    _apply(current, delta, sid)
    entries = sorted(current.values(), key=lambda e: e.path)
    _check_paths(entries, sid)
    _check_totals(entries, totals, sid)
    _RESOLVED.put(header_sha, entries)
    return entries


def _apply(current: dict[str, FileEntry], delta: Delta, sid: str) -> None:
    for p in delta.removed:
        if current.pop(p, None) is None:
            raise UnsafeManifestError(f"manifest {sid} removes {p!r}, which the manifest it builds on does not list")
    for e in delta.changed:
        current[e.path] = e


def parse_labels(items: list[str] | None) -> dict[str, str]:
    """`KEY=VALUE` strings to a dict, with a clear error for anything else."""
    labels: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not LABEL_KEY_RE.match(key):
            raise UsageError(f"invalid label {item!r}", hint="write labels as KEY=VALUE, e.g. --label reason=pre-deploy")
        labels[key] = value
    return labels
