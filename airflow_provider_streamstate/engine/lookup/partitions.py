"""One store partition of a cut, decoded: the files a source lists for it, read and turned
into the partition's key -> value state (HDFS-backed: the snapshot and the deltas after it;
RocksDB: the newest zip's SST files with the changelogs after it overlaid). A lookup reads
one partition this way; a digest of the whole state reads each of them."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from airflow_provider_streamstate.engine.core.errors import NotFoundError, UnsupportedCheckpointError
from airflow_provider_streamstate.engine.lookup.hdfs_state import load_partition
from airflow_provider_streamstate.engine.lookup.rocksdb_sst import SstFile
from airflow_provider_streamstate.engine.lookup.rocksdb_state import (
    DictPartition,
    RocksPartition,
    read_zip_metadata,
)
from airflow_provider_streamstate.engine.lookup.sources import StateFile

VERSIONED = re.compile(r"^(\d+)(?:_[0-9a-fA-F-]+)?\.(delta|snapshot|zip|changelog)$")


def state_files(files: list[StateFile]) -> list[StateFile]:
    """The files that hold a partition's state (no hidden files, checksums or metadata)."""
    return [f for f in files
            if not f.name.startswith(".") and not f.name.endswith(".crc") and "/_metadata/" not in f.path]


def _version(f: StateFile) -> int:
    m = VERSIONED.match(f.name)
    assert m is not None
    return int(m.group(1))


def decode_partition(where: str, files: list[StateFile], provider: str, codec: str,
                     read: Callable[[StateFile], bytes]) -> tuple[Any, int]:
    """The partition's state (`DictPartition` or `RocksPartition`) and an estimate of the
    memory it holds. `provider`: hdfs | rocksdb; `read` fetches one file's bytes."""
    versioned = sorted((f for f in files if VERSIONED.match(f.name)),
                       key=lambda f: (_version(f), f.name.endswith((".delta", ".changelog"))))
    if provider == "hdfs":
        if any(f.name.endswith((".zip", ".changelog")) for f in versioned):
            raise UnsupportedCheckpointError(f"{where} holds RocksDB files in an HDFS-backed store")
        named = [(f"{where}: {f.path}", read(f)) for f in versioned]
        state = load_partition(named, codec)
        return DictPartition(state), sum(len(raw) for _, raw in named) * 3 + 64 * len(state)
    zips = [f for f in versioned if f.name.endswith(".zip")]
    changelogs = [f for f in versioned if f.name.endswith(".changelog")]
    tables: list[SstFile] = []
    families: dict[str, int] = {}
    size = 0
    if zips:
        base = zips[-1]
        meta = read_zip_metadata(read(base), f"{where}: {base.path}")
        families = {str(k): int(v) for k, v in (meta.get("columnFamilyMapping") or {}).items()}
        by_name = {f.name: f for f in files if "/SSTs/" in f.path}
        for sst in meta.get("sstFiles") or []:
            f = by_name.get(str(sst.get("dfsSstFileName")))
            if f is None:
                raise NotFoundError(f"{where} lacks SSTs/{sst.get('dfsSstFileName')}, named by {base.path}",
                                    hint="the cut is incomplete; take the snapshot again")
            data = read(f)
            tables.append(SstFile(data, f"{where}: {f.path}"))
            size += len(data)
        changelogs = [f for f in changelogs if _version(f) > _version(base)]
    named = [(f"{where}: {f.path}", read(f)) for f in changelogs]
    part = RocksPartition(tables, named, codec, families)
    return part, size + part.changelog_bytes + 64 * len(part.overlay)
