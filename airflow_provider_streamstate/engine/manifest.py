"""The snapshot manifest: what a snapshot is, as versioned JSON.

A manifest is the only thing that makes a snapshot visible, and it is untrusted input
when read back: `Manifest.from_json` validates every field and every path before any
caller can act on it (a restore must never write outside its target).
"""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from airflow_provider_streamstate.engine.errors import UnsafeManifestError, UsageError

FORMAT = "streamstate.manifest/v1"
STREAM_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
SNAPSHOT_ID_RE = re.compile(r"^(\d{12})-(\d{8}T\d{12}Z)$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
MAX_BATCH_ID = 10**12 - 1


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


def new_snapshot_id(batch_id: int, now: datetime | None = None) -> str:
    """`<batch, 12 digits>-<UTC time to the microsecond>`: sorts by batch, then time."""
    if not 0 <= batch_id <= MAX_BATCH_ID:
        raise UsageError(f"batch id {batch_id} out of range")
    now = now or datetime.now(UTC)
    return f"{batch_id:012d}-{now.strftime('%Y%m%dT%H%M%S%f')}Z"


def safe_relative_path(path: object) -> str:
    """Return `path` if it is a normalised relative POSIX path that stays below its root.

    Rejects absolute paths, `..`, `.`, empty segments, backslashes, NUL and control
    characters, so that `os.path.join(target, path)` can never escape `target`.
    """
    if not isinstance(path, str) or not path:
        raise UnsafeManifestError(f"manifest has an empty or non-string file path: {path!r}")
    if path.startswith("/") or "\\" in path or any(ord(c) < 32 for c in path) or re.match(r"^[A-Za-z]:", path):
        raise UnsafeManifestError(f"manifest path {path!r} is not a plain relative path")
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts) or posixpath.normpath(path) != path:
        raise UnsafeManifestError(f"manifest path {path!r} is not normalised or escapes the target")
    return path


@dataclass(frozen=True)
class FileEntry:
    """One checkpoint file: where it goes, how big it is, its content's sha256."""

    path: str
    size: int
    sha256: str
    mtime_ns: int = 0  # of the source file when read: lets the next snapshot reuse the hash

    @classmethod
    def from_dict(cls, d: Any) -> FileEntry:
        if not isinstance(d, dict):
            raise UnsafeManifestError("manifest file entry is not an object")
        path = safe_relative_path(d.get("path"))
        size, sha, mtime = d.get("size"), d.get("sha256"), d.get("mtime_ns", 0)
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise UnsafeManifestError(f"manifest entry {path!r} has an invalid size {size!r}")
        if not isinstance(sha, str) or not SHA256_RE.match(sha):
            raise UnsafeManifestError(f"manifest entry {path!r} has an invalid sha256 {sha!r}")
        if not isinstance(mtime, int) or isinstance(mtime, bool):
            raise UnsafeManifestError(f"manifest entry {path!r} has an invalid mtime_ns {mtime!r}")
        return cls(path, size, sha, mtime)


@dataclass(frozen=True)
class OperatorInfo:
    """A stateful operator of the query, as the checkpoint describes it."""

    operator_id: int
    name: str
    stores: list[str]
    partitions: int
    state_version: int  # the state version this snapshot holds (batch id + 1)


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
    files: list[FileEntry]
    parent: str | None
    spark_version: str | None
    labels: dict[str, str] = field(default_factory=dict)
    checkpoint: str = ""
    created_by: str = ""
    format: str = FORMAT

    @property
    def bytes_total(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def blobs(self) -> dict[str, int]:
        """Distinct blobs this snapshot references, with their sizes."""
        return {f.sha256: f.size for f in self.files}

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["totals"] = {"files": len(self.files), "bytes": self.bytes_total, "blobs": len(self.blobs)}
        # Stable key order: format first, files last, for people reading it.
        files = d.pop("files")
        return {"format": d.pop("format"), **d, "files": files}

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), indent=1, sort_keys=False).encode()

    @classmethod
    def from_json(cls, data: bytes, *, expect_stream: str | None = None, expect_id: str | None = None) -> Manifest:
        """Parse and validate an untrusted manifest; raise UnsafeManifestError on anything off."""
        try:
            d = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise UnsafeManifestError(f"manifest is not valid JSON: {exc}") from None
        if not isinstance(d, dict):
            raise UnsafeManifestError("manifest is not a JSON object")
        if d.get("format") != FORMAT:
            raise UnsafeManifestError(
                f"manifest format {d.get('format')!r} is not {FORMAT!r}",
                hint="upgrade streamstate to read snapshots written by a newer version",
            )
        try:
            snapshot_id = validate_snapshot_id(d["snapshot_id"])
            stream = validate_stream_name(d["stream"])
        except (KeyError, UsageError) as exc:
            raise UnsafeManifestError(f"manifest has an invalid identity: {exc}") from None
        if expect_stream is not None and stream != expect_stream:
            raise UnsafeManifestError(f"manifest {snapshot_id} belongs to stream {stream!r}, not {expect_stream!r}")
        if expect_id is not None and snapshot_id != expect_id:
            raise UnsafeManifestError(f"manifest stored as {expect_id} claims to be {snapshot_id}")
        batch_id = d.get("batch_id")
        if not isinstance(batch_id, int) or not 0 <= batch_id <= MAX_BATCH_ID:
            raise UnsafeManifestError(f"manifest {snapshot_id} has an invalid batch_id {batch_id!r}")
        if int(snapshot_id[:12]) != batch_id:
            raise UnsafeManifestError(f"manifest {snapshot_id} records batch {batch_id}, its id says otherwise")
        raw_files = d.get("files")
        if not isinstance(raw_files, list):
            raise UnsafeManifestError(f"manifest {snapshot_id} has no file list")
        files = [FileEntry.from_dict(f) for f in raw_files]
        seen: set[str] = set()
        for f in files:
            # A path that is also a directory prefix of another would make one a file and a dir.
            if f.path in seen:
                raise UnsafeManifestError(f"manifest {snapshot_id} lists {f.path!r} twice")
            seen.add(f.path)
        dirs = {posixpath.dirname(p) for p in seen}
        for p in list(dirs):
            while p:
                if p in seen:
                    raise UnsafeManifestError(f"manifest {snapshot_id} uses {p!r} as both a file and a directory")
                p = posixpath.dirname(p)
        parent = d.get("parent")
        if parent is not None:
            try:
                validate_snapshot_id(parent)
            except UsageError:
                raise UnsafeManifestError(f"manifest {snapshot_id} has an invalid parent {parent!r}") from None
        try:
            operators = [OperatorInfo(**op) for op in d.get("operators", [])]
            return cls(
                snapshot_id=snapshot_id,
                stream=stream,
                batch_id=batch_id,
                created_at=str(d["created_at"]),
                query_id=str(d.get("query_id", "")),
                kafka_offsets={str(t): {str(p): int(o) for p, o in ps.items()} for t, ps in d.get("kafka_offsets", {}).items()},
                sources=list(d.get("sources", [])),
                watermark_ms=d.get("watermark_ms"),
                next_watermark_ms=d.get("next_watermark_ms"),
                batch_timestamp_ms=d.get("batch_timestamp_ms"),
                state_store=str(d.get("state_store", "")),
                operators=operators,
                spark_conf={str(k): str(v) for k, v in d.get("spark_conf", {}).items()},
                files=files,
                parent=parent,
                spark_version=d.get("spark_version"),
                labels={str(k): str(v) for k, v in d.get("labels", {}).items()},
                checkpoint=str(d.get("checkpoint", "")),
                created_by=str(d.get("created_by", "")),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise UnsafeManifestError(f"manifest {snapshot_id} is malformed: {exc}") from None


def parse_labels(items: list[str] | None) -> dict[str, str]:
    """`KEY=VALUE` strings to a dict, with a clear error for anything else."""
    labels: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not re.match(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$", key):
            raise UsageError(f"invalid label {item!r}", hint="write labels as KEY=VALUE, e.g. --label reason=pre-deploy")
        labels[key] = value
    return labels
