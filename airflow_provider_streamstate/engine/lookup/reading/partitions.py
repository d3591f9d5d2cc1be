"""One store partition of a cut, decoded into memory, reusing what earlier lookups decoded.

A partition at a version is a base (an HDFS-backed `.snapshot`, a RocksDB checkpoint zip
with its tables, or nothing) and the per-version files after it (`.delta`s, `.changelog`s),
applied in version order. Between two snapshots of a running stream (or two batches of a
live checkpoint) the base usually stays and versions are appended, so the decoded partition
is cached under its files' identities *in version order* (a blob's sha256, a checkpoint
file's path, size and mtime), and a partition whose files start with those of a cached one
is that one plus its newer files: only those are read and applied. RocksDB tables are
cached by identity on their own, so a new zip that shares most tables with an older one
(RocksDB without changelog) reads only the new tables. That is what makes a key's history
read each changed blob once, and a lookup after the next commit of a live checkpoint read
one delta.
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from typing import Any

from airflow_provider_streamstate.engine.core.errors import NotFoundError, UnsupportedCheckpointError
from airflow_provider_streamstate.engine.lookup.formats.codec import decompress
from airflow_provider_streamstate.engine.lookup.formats.hdfs_state import apply_records
from airflow_provider_streamstate.engine.lookup.formats.rocksdb_sst import SstFile
from airflow_provider_streamstate.engine.lookup.formats.rocksdb_state import (
    DictPartition,
    RocksPartition,
    read_zip_metadata,
)
from airflow_provider_streamstate.engine.lookup.reading.cache import PartitionCache
from airflow_provider_streamstate.engine.lookup.reading.sources import OperatorView, StateFile, StateSource

VERSIONED = re.compile(r"^(\d+)(?:_[0-9a-fA-F-]+)?\.(delta|snapshot|zip|changelog)$")
ENTRY_OVERHEAD = 64  # bytes a decoded key/value pair costs beyond its bytes, for the cache's bound


class Reads:
    """What one lookup read from its source (cache misses only)."""

    def __init__(self) -> None:
        self.files: list[str] = []
        self.digests: list[Any] = []  # the identity of each file read, in order
        self.bytes = 0
        self.all_cached = True

    def read(self, src: StateSource, f: StateFile) -> bytes:
        data = src.read(f)
        self.files.append(f.path)
        self.digests.append(f.identity)
        self.bytes += len(data)
        return data


def _version(f: StateFile) -> int:
    m = VERSIONED.match(f.name)
    assert m is not None
    return int(m.group(1))


def partition_files(src: StateSource, op: OperatorView, partition: int, store: str) -> list[StateFile]:
    """The state files of one store partition (no checksums, hidden or metadata files)."""
    return [f for f in src.partition_files(op.operator_id, partition, store)
            if not f.name.startswith(".") and not f.name.endswith(".crc") and "/_metadata/" not in f.path]


def partition_state(src: StateSource, op: OperatorView, partition: int, store: str, provider: str, codec: str,
                    cache: PartitionCache, reads: Reads) -> Any:
    """One store partition decoded: from the cache when its files are unchanged, from a
    cached older version of it plus the newer files when it has one, else from its files."""
    files = partition_files(src, op, partition, store)
    versioned = sorted((f for f in files if VERSIONED.match(f.name)),
                       key=lambda f: (_version(f), f.name.endswith((".delta", ".changelog"))))
    chain = tuple(f.identity for f in versioned)
    tables = frozenset(f.identity for f in files if f not in versioned)
    family = ("partition", provider, codec, tables)

    def key(n: int) -> Hashable:
        return (*family, chain[:n])

    def load() -> tuple[Any, int]:
        base, done = None, 0
        for n in range(len(chain) - 1, 0, -1):  # the longest cached older version
            base = cache.peek(key(n))
            if base is not None:
                done = n
                break
        if provider == "hdfs":
            return _hdfs(src, versioned, done, base, codec, reads)
        return _rocks(src, files, versioned, done, base, codec, cache, reads)

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


def _rocks(src: StateSource, files: list[StateFile], versioned: list[StateFile], done: int,
           base: RocksPartition | None, codec: str, cache: PartitionCache, reads: Reads) -> tuple[RocksPartition, int]:
    zips = [f for f in versioned if f.name.endswith(".zip")]
    changelogs = [f for f in versioned if f.name.endswith(".changelog")]
    if zips:  # the plan names one zip; changelogs after it
        newest = _version(zips[-1])
        changelogs = [f for f in changelogs if _version(f) > newest]
    if base is not None:
        todo = [f for f in versioned[done:] if f in changelogs]
        named = [(f"{src.description}: {f.path}", reads.read(src, f)) for f in todo]
        part = base.extended(named, codec)
        return part, part.table_bytes + part.changelog_bytes + ENTRY_OVERHEAD * len(part.overlay)
    tables: list[SstFile] = []
    families: dict[str, int] = {}
    if zips:
        zf = zips[-1]
        where = f"{src.description}: {zf.path}"
        meta = read_zip_metadata(reads.read(src, zf), where)
        families = {str(k): int(v) for k, v in (meta.get("columnFamilyMapping") or {}).items()}
        by_name = {f.name: f for f in files if "/SSTs/" in f.path}
        for sst in meta.get("sstFiles") or []:
            f = by_name.get(str(sst.get("dfsSstFileName")))
            if f is None:
                raise NotFoundError(f"{src.description} lacks SSTs/{sst.get('dfsSstFileName')}, named by {zf.path}",
                                    hint="the cut is incomplete; take the snapshot again")
            tables.append(_table(src, f, cache, reads))
    named = [(f"{src.description}: {f.path}", reads.read(src, f)) for f in changelogs]
    part = RocksPartition(tables, named, codec, families)
    return part, part.table_bytes + part.changelog_bytes + ENTRY_OVERHEAD * len(part.overlay)


def _table(src: StateSource, f: StateFile, cache: PartitionCache, reads: Reads) -> SstFile:
    """A RocksDB table, parsed once per identity (zips of consecutive versions share most)."""

    def load() -> tuple[SstFile, int]:
        data = reads.read(src, f)
        return SstFile(data, f"{src.description}: {f.path}"), len(data)

    table, _ = cache.get_or_load(("table", f.identity), load)
    return table
