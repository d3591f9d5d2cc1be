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

from airflow_provider_streamstate.engine.core.anchor import anchors_from_json, anchors_to_json
from airflow_provider_streamstate.engine.core.digest import SHA256_RE
from airflow_provider_streamstate.engine.core.errors import UnsafeManifestError, UsageError

FORMAT = "streamstate.manifest/v2"
FORMAT_V1 = "streamstate.manifest/v1"  # no timeline: read as timeline 1
STREAM_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# Timeline 1 ids carry no suffix (so every v1 id is a valid timeline-1 id); later ones `-t<N>`.
SNAPSHOT_ID_RE = re.compile(r"^(\d{12})-(\d{8}T\d{12}Z)(?:-t([2-9]|[1-9]\d{1,8}))?$")
LABEL_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$")
MAX_BATCH_ID = 10**12 - 1
MAX_TIMELINE = 10**9 - 1
STATE_STORES = ("hdfs", "rocksdb", "rocksdb-changelog", "none")


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
    # transformWithState: its state variables ({"name", "kind", "ttl"}) and time mode.
    state_variables: list[dict[str, Any]] = field(default_factory=list)
    time_mode: str | None = None

    @property
    def is_transform_with_state(self) -> bool:
        return bool(self.state_variables)

    def variable(self, name: str) -> dict[str, Any] | None:
        return next((v for v in self.state_variables if v["name"] == name), None)


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
    timeline: int = 1  # the line of history it belongs to; a rollback starts a new one
    # Per topic: partition count and the last record batch N consumed in each partition, read
    # from the primary cluster when the snapshot was taken (anchors.py); None: not recorded.
    kafka_anchors: dict[str, Any] | None = None
    # Spark's state checkpoint format (spark.sql.streaming.stateStore.checkpointFormatVersion):
    # 2 names RocksDB state files by unique id; a restored copy must run with the same.
    checkpoint_format: int = 1
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
        for op in d["operators"]:  # only transformWithState operators have these
            if not op["state_variables"]:
                del op["state_variables"], op["time_mode"]
        if d["checkpoint_format"] == 1:
            del d["checkpoint_format"]  # optional: format 1 manifests stay as they were
        if d["kafka_anchors"] is None:
            del d["kafka_anchors"]  # optional: manifests without anchors stay as they were
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
        if d.get("format") not in (FORMAT, FORMAT_V1):
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
        ref = SnapshotRef.parse(snapshot_id)
        f = _Fields(d, snapshot_id)
        batch_id = f.integer("batch_id", 0, MAX_BATCH_ID)
        if ref.batch_id != batch_id:
            raise UnsafeManifestError(f"manifest {snapshot_id} records batch {batch_id}, its id says otherwise")
        # v1 manifests predate timelines: everything they describe is timeline 1.
        timeline = f.integer("timeline", 1, MAX_TIMELINE) if d["format"] == FORMAT else 1
        if ref.timeline != timeline:
            raise UnsafeManifestError(f"manifest {snapshot_id} records timeline {timeline}, its id says otherwise")
        raw_files = d.get("files")
        if not isinstance(raw_files, list):
            raise UnsafeManifestError(f"manifest {snapshot_id} has no file list")
        files = [FileEntry.from_dict(e) for e in raw_files]
        seen: set[str] = set()
        for e in files:
            # A path that is also a directory prefix of another would make one a file and a dir.
            if e.path in seen:
                raise UnsafeManifestError(f"manifest {snapshot_id} lists {e.path!r} twice")
            seen.add(e.path)
        dirs = {posixpath.dirname(p) for p in seen}
        for p in list(dirs):
            while p:
                if p in seen:
                    raise UnsafeManifestError(f"manifest {snapshot_id} uses {p!r} as both a file and a directory")
                p = posixpath.dirname(p)
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
        return cls(
            snapshot_id=snapshot_id,
            stream=stream,
            batch_id=batch_id,
            created_at=f.timestamp("created_at"),
            query_id=f.string("query_id", default=""),
            kafka_offsets=f.kafka_offsets("kafka_offsets"),
            sources=f.sources("sources"),
            watermark_ms=f.optional_int("watermark_ms"),
            next_watermark_ms=f.optional_int("next_watermark_ms"),
            batch_timestamp_ms=f.optional_int("batch_timestamp_ms"),
            state_store=state_store,
            operators=f.operators("operators"),
            spark_conf=f.str_map("spark_conf"),
            files=files,
            parent=parent,
            spark_version=f.optional_str("spark_version"),
            labels=labels,
            checkpoint=f.string("checkpoint", default=""),
            created_by=f.string("created_by", default=""),
            timeline=timeline,
            kafka_anchors=f.anchors("kafka_anchors"),
            checkpoint_format=f.integer("checkpoint_format", 1, 2) if "checkpoint_format" in d else 1,
        )


class _Fields:
    """Typed, range-checked access to an untrusted manifest's fields (one error per field)."""

    def __init__(self, d: dict[str, Any], snapshot_id: str) -> None:
        self.d = d
        self.sid = snapshot_id

    def _bad(self, key: str, why: str) -> UnsafeManifestError:
        return UnsafeManifestError(f"manifest {self.sid} has an invalid {key}: {why}")

    def integer(self, key: str, lo: int, hi: int, value: Any = None) -> int:
        v = self.d.get(key) if value is None else value
        if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
            raise self._bad(key, f"{v!r} is not an integer in {lo}..{hi}")
        return v

    def optional_int(self, key: str) -> int | None:
        v = self.d.get(key)
        return None if v is None else self.integer(key, -(2**63), 2**63 - 1)

    def string(self, key: str, *, default: str | None = None) -> str:
        v = self.d.get(key, default)
        if not isinstance(v, str) or len(v) > 4096:
            raise self._bad(key, f"{v!r} is not a string")
        return v

    def optional_str(self, key: str) -> str | None:
        return None if self.d.get(key) is None else self.string(key)

    def timestamp(self, key: str) -> str:
        v = self.string(key)
        try:
            datetime.fromisoformat(v.replace("Z", "+00:00"))
        except ValueError:
            raise self._bad(key, f"{v!r} is not an ISO 8601 time") from None
        return v

    def str_map(self, key: str) -> dict[str, str]:
        v = self.d.get(key, {})
        if not isinstance(v, dict) or not all(isinstance(k, str) and isinstance(x, str) for k, x in v.items()):
            raise self._bad(key, "not an object of strings")
        return dict(v)

    def kafka_offsets(self, key: str) -> dict[str, dict[str, int]]:
        v = self.d.get(key, {})
        if not isinstance(v, dict):
            raise self._bad(key, "not an object")
        out: dict[str, dict[str, int]] = {}
        for topic, parts in v.items():
            if not isinstance(topic, str) or not topic or not isinstance(parts, dict):
                raise self._bad(key, f"topic {topic!r} is not an object of partitions")
            for p, o in parts.items():
                if not (isinstance(p, str) and p.isdigit()):
                    raise self._bad(key, f"partition {p!r} of {topic} is not a number")
                self.integer(key, -2, 2**63 - 1, value=o)
            out[topic] = {str(int(p)): o for p, o in parts.items()}
        return out

    def anchors(self, key: str) -> dict[str, Any] | None:
        v = self.d.get(key)
        if v is None:
            return None
        try:
            return anchors_to_json(anchors_from_json(v))
        except UnsafeManifestError as exc:
            raise self._bad(key, exc.message) from None

    def sources(self, key: str) -> list[dict[str, Any]]:
        v = self.d.get(key, [])
        if not isinstance(v, list):
            raise self._bad(key, "not a list")
        for i, src in enumerate(v):
            if not isinstance(src, dict) or src.get("index") != i or src.get("kind") not in ("kafka", "other"):
                raise self._bad(key, f"entry {i} is not {{'index': {i}, 'kind': 'kafka'|'other', 'offsets': ...}}")
        return [dict(src) for src in v]

    def operators(self, key: str) -> list[OperatorInfo]:
        v = self.d.get(key, [])
        if not isinstance(v, list):
            raise self._bad(key, "not a list")
        out = []
        for op in v:
            if not isinstance(op, dict):
                raise self._bad(key, f"{op!r} is not an object")
            stores = op.get("stores")
            if not isinstance(stores, list) or not stores or not all(
                isinstance(s, str) and STREAM_NAME_RE.match(s) for s in stores
            ):
                raise self._bad(key, f"stores {stores!r} are not a list of store names")
            name = op.get("name")
            if not isinstance(name, str):
                raise self._bad(key, f"operator name {name!r} is not a string")
            variables = op.get("state_variables", [])
            if not isinstance(variables, list) or not all(
                isinstance(v, dict) and isinstance(v.get("name"), str) and isinstance(v.get("kind"), str)
                and isinstance(v.get("ttl"), bool) for v in variables
            ):
                raise self._bad(key, f"state variables {variables!r} are not a list of {{name, kind, ttl}}")
            time_mode = op.get("time_mode")
            if time_mode is not None and not isinstance(time_mode, str):
                raise self._bad(key, f"time mode {time_mode!r} is not a string")
            out.append(
                OperatorInfo(
                    operator_id=self.integer(key, 0, 10**6, value=op.get("operator_id")),
                    name=name,
                    stores=list(stores),
                    partitions=self.integer(key, 1, 10**6, value=op.get("partitions")),
                    state_version=self.integer(key, 0, MAX_BATCH_ID + 1, value=op.get("state_version")),
                    state_variables=[{"name": v["name"], "kind": v["kind"], "ttl": v["ttl"]} for v in variables],
                    time_mode=time_mode,
                )
            )
        return out


def parse_labels(items: list[str] | None) -> dict[str, str]:
    """`KEY=VALUE` strings to a dict, with a clear error for anything else."""
    labels: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not LABEL_KEY_RE.match(key):
            raise UsageError(f"invalid label {item!r}", hint="write labels as KEY=VALUE, e.g. --label reason=pre-deploy")
        labels[key] = value
    return labels
