"""Where a lookup reads state files: a checkpoint (at a committed batch) or a snapshot.

Both give the same view: the batch, the confs the checkpoint pinned, an operator's
description, and the files of one store partition *exactly as a cut holds them*. A
checkpoint is planned with the snapshot engine's own planner (`CheckpointReader.
plan_partition`, the same rules as `plan`), so a lookup reads what a snapshot of that batch
would contain; a snapshot's files come from its manifest and are read as blobs of the
store. Only the files of the key's partition (and the operator's schema files) are ever read.

Three ways to read a file, and what verifies each (invariant 4 for a snapshot's blobs):
`read` (whole: a blob is checked against its sha256), `read_range` (a range, for RocksDB
tables: no sha256 can be checked, and every block read is checked against its own RocksDB
checksum instead), `open_stream` (a stream read until the reader has its answer: a blob read
to its end is checked against its sha256; one the reader leaves early is checked by its
codec's per-block checksums, lz4-java's XXHash32, and is read whole when its codec has none).
"""

from __future__ import annotations

import hashlib
import io
import posixpath
import re
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

from airflow_provider_streamstate.engine.catalog.snapshots import resolve_snapshot
from airflow_provider_streamstate.engine.checkpoint.filesystems.base import FileStat
from airflow_provider_streamstate.engine.checkpoint.plans import PartitionPlan
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.core.errors import CheckpointChanged, CorruptionError, NotFoundError
from airflow_provider_streamstate.engine.core.manifest import Manifest
from airflow_provider_streamstate.engine.stores.base import SnapshotStore

_STATE_FILE = re.compile(r"^(\d+)(?:_[0-9a-fA-F-]+)?\.(delta|snapshot|zip|changelog)$")


@dataclass(frozen=True)
class StateFile:
    """A file of the cut: its path below the checkpoint root, size, and an identity that
    changes whenever its content does (a blob's sha256, or a local file's path, size and
    mtime) — what the partition cache is keyed by."""

    path: str
    size: int
    identity: tuple[Any, ...]

    @property
    def name(self) -> str:
        return posixpath.basename(self.path)


@dataclass(frozen=True)
class OperatorView:
    operator_id: int
    name: str
    stores: tuple[str, ...]
    partitions: int
    state_variables: tuple[dict[str, Any], ...] = ()


class StateSource:
    """Read access to the state files of one batch of one checkpoint or snapshot."""

    description: str
    batch_id: int
    conf: dict[str, str]
    state_store: str  # hdfs | rocksdb | rocksdb-changelog
    checkpoint_format: int

    def operator(self, op: int | str) -> OperatorView:
        raise NotImplementedError

    def partition_files(self, op_id: int, partition: int, store: str) -> list[StateFile]:
        """The state files of one store partition (snapshot/zip, deltas/changelogs, SSTs)."""
        raise NotImplementedError

    def operator_files(self, op_id: int) -> list[StateFile]:
        """The operator's schema and metadata files (`_metadata/`, `_stateSchema/`)."""
        raise NotImplementedError

    def read(self, f: StateFile) -> bytes:
        raise NotImplementedError

    def read_range(self, f: StateFile, offset: int, length: int) -> bytes:
        """`length` bytes of the file from `offset`; the caller checks them (block checksums)."""
        return self.read(f)[offset:offset + length]

    def open_stream(self, f: StateFile) -> AbstractContextManager[Stream]:
        """The file's bytes as a stream (`Stream`), checked as the module docstring says."""
        return _whole_stream(self.read(f))


class Stream:
    """Reads of one file, front to back. `done()` says the reader saw its end (a snapshot's
    blob is then checked against its sha256)."""

    def __init__(self, read: Callable[[int], bytes], finish: Callable[[], None] = lambda: None) -> None:
        self._read, self._finish = read, finish
        self.bytes = 0

    def read(self, n: int) -> bytes:
        data = self._read(n)
        self.bytes += len(data)
        return data

    def done(self) -> None:
        self._finish()


@contextmanager
def _whole_stream(data: bytes) -> Iterator[Stream]:
    view = io.BytesIO(data)
    yield Stream(view.read)


def _pick(operators: list[OperatorView], op: int | str, where: str) -> OperatorView:
    if not operators:
        raise NotFoundError(f"{where} holds no state", hint="a stateless query has no key to look up")
    listing = ", ".join(f"{o.operator_id} ({o.name})" for o in operators)
    if isinstance(op, str) and op.strip().isdigit():
        op = int(op)
    found = [o for o in operators if (o.operator_id == op if isinstance(op, int) else o.name == op)]
    if len(found) != 1:
        raise NotFoundError(f"{where} has {'no' if not found else 'several'} stateful operator(s) {op!r}",
                            hint=f"operators there: {listing}; name one by id")
    return found[0]


def _view(d: dict[str, Any]) -> OperatorView:
    return OperatorView(int(d["operator_id"]), str(d.get("name", "unknown")), tuple(d["stores"]),
                        int(d["partitions"]), tuple(d.get("state_variables") or ()))


class CheckpointSource(StateSource):
    """A live (or stopped) checkpoint, local or on S3, read in place at a committed batch
    (default: the newest when the source is made)."""

    def __init__(self, location: str, batch_id: int | None = None, *, reader: CheckpointReader | None = None) -> None:
        self.reader = reader or CheckpointReader(location)
        self.batch_id = self.reader.resolve_batch(batch_id)
        self.description = f"checkpoint {self.reader.where} at batch {self.batch_id}"
        self._plans: dict[tuple[int, int, str], PartitionPlan] = {}
        self._ops: dict[int, OperatorView] = {}
        meta, _ = self.reader.offsets(self.batch_id)
        self.conf = {str(k): str(v) for k, v in (meta.get("conf") or {}).items()}
        self.checkpoint_format = self.reader.checkpoint_format(self.batch_id)
        self.state_store = ""

    def _plan(self, op_id: int, partition: int, store: str) -> PartitionPlan:
        key = (op_id, partition, store)
        if key not in self._plans:
            plan = self.reader.plan_partition(self.batch_id, op_id, partition, store)
            self._plans[key] = plan
            self._ops[op_id] = _view(plan.operator)
            self.state_store = plan.state_store if self.state_store in ("", "rocksdb") else self.state_store
        return self._plans[key]

    def operator(self, op: int | str) -> OperatorView:
        fs = self.reader.fs
        ids = sorted(int(p) for p in fs.listdir("state") if p.isdigit()) if fs.is_dir("state") else []
        if isinstance(op, int) or (isinstance(op, str) and op.strip().isdigit()):
            wanted = int(op)
            if wanted not in ids:
                raise NotFoundError(f"{self.description} has no stateful operator {wanted}",
                                    hint=f"its operators: {', '.join(map(str, ids)) or 'none (a stateless query)'}")
            candidates = [wanted]
        else:
            candidates = ids
        views = []
        for op_id in candidates:
            if op_id not in self._ops:
                self._plan(op_id, 0, self._first_store(op_id))
            views.append(self._ops[op_id])
        return _pick(views, op, self.description)

    def _first_store(self, op_id: int) -> str:
        """A store name to plan partition 0 with (the plan then reports all of them)."""
        part0 = f"state/{op_id}/0"
        fs = self.reader.fs
        if not fs.is_dir(part0):
            return "default"
        names = fs.listdir(part0)
        if any(_STATE_FILE.match(n) for n in names):
            return "default"
        subdirs = sorted(n for n in names if fs.is_dir(f"{part0}/{n}") and n not in ("_metadata", "SSTs", "logs"))
        return subdirs[0] if subdirs else "default"

    def _files(self, plan: PartitionPlan) -> list[StateFile]:
        root = self.reader.root
        out = []
        for f in plan.files:
            ident = (str(root / f.path) if root is not None else f"{self.reader.where}/{f.path}",
                     f.size, f.mtime_ns, f.etag)
            out.append(StateFile(f.path, f.size, ident))
        return out

    def partition_files(self, op_id: int, partition: int, store: str) -> list[StateFile]:
        prefix = f"state/{op_id}/{partition}/"
        return [f for f in self._files(self._plan(op_id, partition, store)) if f.path.startswith(prefix)]

    def operator_files(self, op_id: int) -> list[StateFile]:
        view = self.operator(op_id)
        files: dict[str, StateFile] = {}
        for store in view.stores:
            for f in self._files(self._plan(op_id, 0, store)):
                if "/_metadata/" in f.path or "/_stateSchema/" in f.path:
                    files[f.path] = f
        return list(files.values())

    def read(self, f: StateFile) -> bytes:
        st = self.reader.fs.stat(f.path)
        if st is None:
            raise CheckpointChanged(f"{f.path} of {self.description} vanished while it was read",
                                    hint="Spark's maintenance removed it: look up the key again")
        with self.reader.fs.open_checked(f.path, st) as fh:
            data = fh.read()
        if len(data) != f.size:
            raise CheckpointChanged(f"{f.path} of {self.description} changed while it was read",
                                    hint="look up the key again")
        return data

    def _stat(self, f: StateFile) -> FileStat:
        _, size, mtime_ns, etag = f.identity
        return FileStat(int(size), int(mtime_ns or 0), etag)

    def read_range(self, f: StateFile, offset: int, length: int) -> bytes:
        try:
            return self.reader.fs.read_range(f.path, self._stat(f), offset, length)
        except FileNotFoundError:
            raise CheckpointChanged(f"{f.path} of {self.description} vanished while it was read",
                                    hint="Spark's maintenance removed it: look up the key again") from None

    def open_stream(self, f: StateFile) -> AbstractContextManager[Stream]:
        return self._stream(f)

    @contextmanager
    def _stream(self, f: StateFile) -> Iterator[Stream]:
        try:
            with self.reader.fs.open_checked(f.path, self._stat(f)) as fh:
                stream = Stream(fh.read)

                def finish() -> None:  # read to its end: the file the plan saw, or a changed one
                    if fh.read(1) or stream.bytes != f.size:
                        raise CheckpointChanged(f"{f.path} of {self.description} changed while it was read",
                                                hint="look up the key again")

                stream._finish = finish
                yield stream
        except FileNotFoundError:
            raise CheckpointChanged(f"{f.path} of {self.description} vanished while it was read",
                                    hint="Spark's maintenance removed it: look up the key again") from None


class SnapshotSource(StateSource):
    """A snapshot in a store (id, `latest` or `latest-good:<suite>`): its manifest says which
    files the cut holds, and each is read as a blob."""

    def __init__(self, store: SnapshotStore, stream: str, snapshot: str = "latest", *,
                 manifest: Manifest | None = None) -> None:
        self.store = store
        self.manifest = manifest or resolve_snapshot(store, stream, snapshot)
        m = self.manifest
        self.batch_id = m.batch_id
        self.conf = dict(m.spark_conf)
        self.state_store = m.state_store
        self.checkpoint_format = m.checkpoint_format
        self.description = f"snapshot {m.snapshot_id} of {m.stream}"
        self._files = [StateFile(e.path, e.size, ("sha256", e.sha256)) for e in m.files]
        self._blobs = {e.path: e.blob_id for e in m.files}  # the blob holding each file (its sha256, or a unique id)

    def operator(self, op: int | str) -> OperatorView:
        views = [OperatorView(o.operator_id, o.name, tuple(o.stores), o.partitions, tuple(o.state_variables))
                 for o in self.manifest.operators]
        return _pick(views, op, self.description)

    def partition_files(self, op_id: int, partition: int, store: str) -> list[StateFile]:
        base = f"state/{op_id}/{partition}/" if store == "default" else f"state/{op_id}/{partition}/{store}/"
        out = []
        for f in self._files:
            if not f.path.startswith(base):
                continue
            rest = f.path[len(base):]
            if "/" not in rest or rest.startswith(("SSTs/", "logs/", "_metadata/")):
                out.append(f)
        return out

    def operator_files(self, op_id: int) -> list[StateFile]:
        return [f for f in self._files if f.path.startswith(f"state/{op_id}/")
                and ("/_metadata/" in f.path or "/_stateSchema/" in f.path)]

    def read(self, f: StateFile) -> bytes:
        digest = f.identity[1]
        with self.store.open_blob(self._blobs.get(f.path, digest)) as fh:
            data = fh.read()
        if len(data) != f.size or hashlib.sha256(data).hexdigest() != digest:
            raise self._damaged(f, digest)
        return data

    def _damaged(self, f: StateFile, digest: str) -> CorruptionError:
        return CorruptionError(f"{f.path} of {self.description} (blob {digest[:12]}) does not match its sha256",
                               hint=f"run `streamstate verify --store {self.store.url}` to list the damaged blobs")

    def read_range(self, f: StateFile, offset: int, length: int) -> bytes:
        digest = f.identity[1]
        data = self.store.read_blob_range(self._blobs.get(f.path, digest), offset, length)
        if len(data) != min(length, max(0, f.size - offset)):
            raise CorruptionError(f"{f.path} of {self.description} (blob {digest[:12]}) is shorter than its "
                                  f"{f.size} bytes", hint=f"run `streamstate verify --store {self.store.url}`")
        return data

    def open_stream(self, f: StateFile) -> AbstractContextManager[Stream]:
        return self._stream(f)

    @contextmanager
    def _stream(self, f: StateFile) -> Iterator[Stream]:
        digest = f.identity[1]
        h = hashlib.sha256()
        seen = [0]
        with self.store.open_blob(self._blobs.get(f.path, digest)) as fh:
            def read(n: int) -> bytes:
                data = fh.read(n)
                h.update(data)
                seen[0] += len(data)
                return data

            def finish() -> None:
                if fh.read(1) or seen[0] != f.size or h.hexdigest() != digest:
                    raise self._damaged(f, digest)

            yield Stream(read, finish)
