"""One store partition of a cut, read for a key lookup, reusing what earlier lookups read.

A partition at a version is a base (an HDFS-backed `.snapshot`, a RocksDB checkpoint zip
with its tables, or nothing) and the per-version files after it (`.delta`s, `.changelog`s),
applied in version order.

RocksDB: the zip (Spark's metadata, RocksDB's MANIFEST: each table's key range) and the
changelogs after it are read whole and decoded into an overlay; the tables are opened only
when a key needs them (`formats.rocksdb_sst`: a ranged read of their tail, then one block
per key) and cached by their identity (a blob's sha256, a checkpoint file's path, size and
mtime or ETag) with the blocks they read. Between two snapshots of a running stream (or two
batches of a live checkpoint) the base usually stays and versions are appended, so the
decoded overlay is cached under its files' identities *in version order*, and a partition
whose files start with those of a cached one is that one plus its newer files: only those
are read. That is what makes a key's history read each changed blob once, and a lookup
after the next commit of a live checkpoint read one changelog.

HDFS-backed: `HdfsKeys` reads the files newest first, each as a stream decompressed block by
block, and stops at the first file that decides the key (a delta's last record of it, or the
snapshot's); a file read to its end is cached as a dict by its identity. `partition_state`
decodes a whole partition (a full scan: the digest), each table read whole.

`Reads` counts what one request read (files, bytes, requests) and refuses to go past its
byte budget (`max_bytes`) before it reads.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any, cast

from airflow_provider_streamstate.engine.core.errors import (
    NotFoundError,
    ReadBudgetExceeded,
    UnsupportedCheckpointError,
)
from airflow_provider_streamstate.engine.lookup.formats.codec import (
    decompress,
    iter_decompressed,
    verified_per_block,
)
from airflow_provider_streamstate.engine.lookup.formats.hdfs_state import apply_records, iter_records
from airflow_provider_streamstate.engine.lookup.formats.rocksdb_manifest import TableRange
from airflow_provider_streamstate.engine.lookup.formats.rocksdb_sst import Entry, SstFile
from airflow_provider_streamstate.engine.lookup.formats.rocksdb_state import (
    DictPartition,
    RocksPartition,
    read_zip,
)
from airflow_provider_streamstate.engine.lookup.reading.cache import PartitionCache
from airflow_provider_streamstate.engine.lookup.reading.sources import (
    OperatorView,
    StateFile,
    StateSource,
    Stream,
)

VERSIONED = re.compile(r"^(\d+)(?:_[0-9a-fA-F-]+)?\.(delta|snapshot|zip|changelog)$")
ENTRY_OVERHEAD = 64  # bytes a decoded key/value pair costs beyond its bytes, for the cache's bound
STREAM_CHUNK = 1 << 20  # what a stream asks its source for at a time


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n:,} bytes"


class Reads:
    """What one request read from its sources (cache misses only), within `max_bytes`."""

    def __init__(self, max_bytes: int | None = None) -> None:
        self.files: list[str] = []
        self.digests: list[Any] = []  # the identity of each file read, in order
        self.bytes = 0
        self.requests = 0
        self.all_cached = True
        self.max_bytes = max_bytes

    def charge(self, n: int, what: str) -> None:
        """Count `n` bytes about to be read; ReadBudgetExceeded (nothing read) past the budget."""
        if self.max_bytes is not None and self.bytes + n > self.max_bytes:
            raise ReadBudgetExceeded(
                f"the lookup would read more than its budget of {_mib(self.max_bytes)} "
                f"({_mib(self.bytes)} read, {_mib(n)} more for {what})",
                hint="raise the byte budget (`--max-bytes`; the API server's [streamstate] lookup_max_mb), "
                "or read this state with Spark")
        self.bytes += n

    def _touch(self, f: StateFile) -> None:
        if f.path not in self.files:
            self.files.append(f.path)
            self.digests.append(f.identity)

    def read(self, src: StateSource, f: StateFile) -> bytes:
        self.charge(f.size, f.path)
        data = src.read(f)
        self.bytes += len(data) - f.size
        self.requests += 1
        self._touch(f)
        return data

    def read_range(self, src: StateSource, f: StateFile, offset: int, length: int) -> bytes:
        self.charge(length, f.path)
        data = src.read_range(f, offset, length)
        self.bytes += len(data) - length
        self.requests += 1
        self._touch(f)
        return data

    @contextmanager
    def stream(self, src: StateSource, f: StateFile) -> Iterator[Stream]:
        """The file as a stream whose every read is counted (and refused past the budget)."""
        self.requests += 1
        self._touch(f)
        with src.open_stream(f) as raw:
            def read(n: int) -> bytes:
                want = min(n, max(0, f.size - raw.bytes))
                self.charge(want, f.path)
                data = raw.read(n)
                self.bytes += len(data) - want
                return data

            yield Stream(read, raw.done)


def _version(f: StateFile) -> int:
    m = VERSIONED.match(f.name)
    assert m is not None
    return int(m.group(1))


def partition_files(src: StateSource, op: OperatorView, partition: int, store: str) -> list[StateFile]:
    """The state files of one store partition (no checksums, hidden or metadata files)."""
    return [f for f in src.partition_files(op.operator_id, partition, store)
            if not f.name.startswith(".") and not f.name.endswith(".crc") and "/_metadata/" not in f.path]


def _chain(src: StateSource, op: OperatorView, partition: int, store: str
           ) -> tuple[list[StateFile], list[StateFile]]:
    files = partition_files(src, op, partition, store)
    versioned = sorted((f for f in files if VERSIONED.match(f.name)),
                       key=lambda f: (_version(f), f.name.endswith((".delta", ".changelog"))))
    return files, versioned


def partition_state(src: StateSource, op: OperatorView, partition: int, store: str, provider: str, codec: str,
                    cache: PartitionCache, reads: Reads) -> Any:
    """One store partition decoded whole, for a full scan (`items()`): RocksDB tables read
    whole (one read per table), HDFS-backed files decoded into one dict. From the cache when
    its files are unchanged, from a cached older version of it plus the newer files when it
    has one, else from its files."""
    if provider == "hdfs":
        files, versioned = _chain(src, op, partition, store)
        chain = tuple(f.identity for f in versioned)
        part = _cached_chain(("partition", provider, codec), chain, cache, reads,
                             lambda done, base: _hdfs(src, versioned, done, base, codec, reads))
        return part
    return _rocks_partition(src, op, partition, store, codec, cache, reads, whole=True)


def lookup_partition(src: StateSource, op: OperatorView, partition: int, store: str, provider: str, codec: str,
                     cache: PartitionCache, reads: Reads) -> Any:
    """One store partition, ready to answer `get(key)` (and `scan_prefix` for RocksDB) while
    reading only what the keys asked for need."""
    if provider == "hdfs":
        files, versioned = _chain(src, op, partition, store)
        if any(f.name.endswith((".zip", ".changelog")) for f in versioned):
            raise UnsupportedCheckpointError(f"{src.description} holds RocksDB files in an HDFS-backed store")
        return HdfsKeys(src, versioned, codec, cache, reads)
    return _rocks_partition(src, op, partition, store, codec, cache, reads, whole=False)


def _cached_chain(family: tuple[Any, ...], chain: tuple[Any, ...], cache: PartitionCache, reads: Reads,
                  load_from: Callable[[int, Any], tuple[Any, int]]) -> Any:
    """The value cached for `chain` (file identities in version order), else loaded from the
    longest cached prefix of it (`load_from(files already applied, that value)`)."""

    def key(n: int) -> Hashable:
        return (*family, chain[:n])

    def load() -> tuple[Any, int]:
        for n in range(len(chain) - 1, 0, -1):  # the longest cached older version
            base = cache.peek(key(n))
            if base is not None:
                return load_from(n, base)
        return load_from(0, None)

    part, hit = cache.get_or_load(key(len(chain)), load)
    if not hit:
        reads.all_cached = False
    return part


def _hdfs(src: StateSource, versioned: list[StateFile], done: int, base: DictPartition | None, codec: str,
          reads: Reads) -> tuple[DictPartition, int]:
    if any(f.name.endswith((".zip", ".changelog")) for f in versioned):
        raise UnsupportedCheckpointError(f"{src.description} holds RocksDB files in an HDFS-backed store")
    state: dict[bytes, bytes] = dict(base.state) if base is not None else {}
    size = base.size if base is not None else 0
    for f in versioned[done:]:
        where = f"{src.description}: {f.path}"
        raw = reads.read(src, f)
        apply_records(state, decompress(raw, codec, where), where, removals=not f.name.endswith(".snapshot"))
        size += 3 * len(raw)
    part = DictPartition(state)
    part.size = size
    return part, size + ENTRY_OVERHEAD * len(state)


# --- RocksDB ---------------------------------------------------------------------------------


class _TableRef:
    """A table of a partition as the cached partition names it: its file and key range."""

    def __init__(self, f: StateFile, rng: TableRange | None) -> None:
        self.file, self.range, self.size = f, rng, f.size


class _OpenTable:
    """A table read for one request: opened on first use (from the cache when another lookup
    opened it), its reads counted in the request's `Reads`."""

    def __init__(self, ref: _TableRef, src: StateSource, cache: PartitionCache, reads: Reads, whole: bool) -> None:
        self.file, self.range, self.size = ref.file, ref.range, ref.size
        self._src, self._cache, self._reads, self._whole = src, cache, reads, whole
        self._table: SstFile | None = None

    def _read(self, offset: int, length: int) -> bytes:
        return self._reads.read_range(self._src, self.file, offset, length)

    def open(self) -> SstFile:
        if self._table is None:
            f, src, reads = self.file, self._src, self._reads
            name = f"{src.description}: {f.path}"

            def load() -> tuple[SstFile, int]:
                if self._whole:
                    data = reads.read(src, f)
                    return SstFile(data, name), len(data)
                table = SstFile(self._read, name, size=f.size)
                return table, table.meta_bytes + table.block_cache_bytes

            table, hit = self._cache.get_or_load(("table", f.identity), load)
            if not hit:
                reads.all_cached = False
            self._table = table
        return self._table

    def scan(self, lo: bytes, hi: bytes | None) -> list[Entry]:
        return self.open().scan(lo, hi, self._read)

    def entries(self) -> Iterator[Entry]:
        return self.open().entries(self._read)


def _rocks_partition(src: StateSource, op: OperatorView, partition: int, store: str, codec: str,
                     cache: PartitionCache, reads: Reads, *, whole: bool) -> RocksPartition:
    files, versioned = _chain(src, op, partition, store)
    chain = tuple(f.identity for f in versioned)
    tables = frozenset(f.identity for f in files if f not in versioned)
    part: RocksPartition = _cached_chain(
        ("partition", "rocksdb", codec, tables), chain, cache, reads,
        lambda done, base: _rocks(src, files, versioned, done, base, codec, reads))
    refs = cast("list[_TableRef]", part.refs)
    return part.with_tables([_OpenTable(t, src, cache, reads, whole) for t in refs])


def _rocks(src: StateSource, files: list[StateFile], versioned: list[StateFile], done: int,
           base: RocksPartition | None, codec: str, reads: Reads) -> tuple[RocksPartition, int]:
    zips = [f for f in versioned if f.name.endswith(".zip")]
    changelogs = [f for f in versioned if f.name.endswith(".changelog")]
    if zips:  # the plan names one zip; changelogs after it
        newest = _version(zips[-1])
        changelogs = [f for f in changelogs if _version(f) > newest]
    if base is not None:
        todo = [f for f in versioned[done:] if f in changelogs]
        named = [(f"{src.description}: {f.path}", reads.read(src, f)) for f in todo]
        part = base.extended(named, codec)
        return part, part.changelog_bytes + ENTRY_OVERHEAD * (len(part.overlay) + len(part.refs))
    tables: list[_TableRef] = []
    families: dict[str, int] = {}
    if zips:
        zf = zips[-1]
        where = f"{src.description}: {zf.path}"
        meta, ranges = read_zip(reads.read(src, zf), where)
        families = {str(k): int(v) for k, v in (meta.get("columnFamilyMapping") or {}).items()}
        by_name = {f.name: f for f in files if "/SSTs/" in f.path}
        for sst in meta.get("sstFiles") or []:
            name = str(sst.get("dfsSstFileName"))
            f = by_name.get(name)
            if f is None:
                raise NotFoundError(f"{src.description} lacks SSTs/{name}, named by {zf.path}",
                                    hint="the cut is incomplete; take the snapshot again")
            tables.append(_TableRef(f, ranges.get(name) if ranges else None))
    named = [(f"{src.description}: {f.path}", reads.read(src, f)) for f in changelogs]
    part = RocksPartition([], named, codec, families, refs=tables)
    return part, part.changelog_bytes + ENTRY_OVERHEAD * (len(part.overlay) + len(part.refs))


# --- HDFS-backed -----------------------------------------------------------------------------


class HdfsKeys:
    """An HDFS-backed partition answering `get(key)` from its newest file that decides the
    key: deltas newest first (a delta's last record of the key wins, so a delta holding it is
    read to its end), then the snapshot, left as soon as the key is found when its codec
    checks each block. Files read to their end are cached as dicts by identity."""

    column_families: dict[str, int] = {}

    def __init__(self, src: StateSource, versioned: list[StateFile], codec: str, cache: PartitionCache,
                 reads: Reads) -> None:
        self.src, self.versioned, self.codec, self.cache, self.reads = src, versioned, codec, cache, reads

    def get(self, key: bytes) -> bytes | None:
        for f in reversed(self.versioned):
            decided, value = self._in_file(f, key)
            if decided:
                return value
        return None

    def _in_file(self, f: StateFile, key: bytes) -> tuple[bool, bytes | None]:
        ident = ("hdfs-file", f.identity, self.codec)
        decoded = self.cache.peek(ident)
        if decoded is not None:
            return (key in decoded), decoded.get(key)
        self.reads.all_cached = False
        snapshot = f.name.endswith(".snapshot")
        early = snapshot and verified_per_block(self.codec)  # a snapshot holds each key once
        where = f"{self.src.description}: {f.path}"
        seen: dict[bytes, bytes | None] = {}
        size = 0
        with self.reads.stream(self.src, f) as stream:
            for k, v in iter_records(iter_decompressed(stream.read, self.codec, where), where, removals=not snapshot):
                seen[k] = v
                size += len(k) + (len(v) if v is not None else 0) + ENTRY_OVERHEAD
                if early and k == key:
                    return True, v
            stream.done()
        self.cache.get_or_load(ident, lambda: (seen, size))
        return (key in seen), seen.get(key)
