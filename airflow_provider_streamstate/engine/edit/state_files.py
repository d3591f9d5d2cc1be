"""The one state file an edit writes per store partition: what Spark itself would have
written for the edit's state version, so that Spark loads the edited state as its own.

An edit at committed batch N writes batch N+1, i.e. state version N+2, on top of version
N+1 (engine/lookup/formats/ reads both layouts; this is their inverse):

- HDFS-backed store: `<N+2>.delta`, the codec's stream of records, integers big-endian:
  `key size | key | value size | value` for a put, `key size | key | -1` for a removal,
  `-1` at the end (`HDFSBackedStateStoreProvider`);
- RocksDB store: `<N+2>.changelog` (checkpoint format 2: `<N+2>_<id>.changelog`). Without
  column families, changelog version 1 (the delta's records, keys and values as Spark's
  RocksDB encoders write them), or version 3 in format 2: `writeUTF("v3")`, the lineage
  `writeUTF([{"version": v, "checkpointUniqueId": id}, ...])` of the versions below it, then
  the version 1 records. Spark replays a changelog on load whether or not changelog
  checkpointing is on, and writes its own RocksDB snapshot at a later commit.

Column-family stores (transformWithState, join state format 3: changelog versions 2 and 4)
are refused for now. Every partition gets a file, an empty one where nothing changes: Spark
cannot load version N+2 of a partition without one.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence

from airflow_provider_streamstate.engine.lookup.formats.codec import compress

_INT = struct.Struct(">i")
END = _INT.pack(-1)

# (key bytes, value bytes or None for a removal), as the store keeps them
Op = tuple[bytes, bytes | None]


def records(ops: Sequence[Op]) -> bytes:
    """The records of a delta or a version 1/3 changelog, with the end marker."""
    out = bytearray()
    for key, value in ops:
        out += _INT.pack(len(key)) + key
        out += END if value is None else _INT.pack(len(value)) + value
    out += END
    return bytes(out)


def _utf(text: str) -> bytes:
    """Java's `DataOutputStream.writeUTF` of an ASCII string."""
    data = text.encode("ascii")
    if len(data) > 0xFFFF:
        raise ValueError(f"a writeUTF string of {len(data)} bytes")
    return struct.pack(">H", len(data)) + data


def lineage_json(lineage: Sequence[tuple[int, str]]) -> str:
    """A changelog's lineage as Spark writes it (no spaces)."""
    return json.dumps([{"version": v, "checkpointUniqueId": uid} for v, uid in lineage], separators=(",", ":"))


def delta_file(ops: Sequence[Op], codec: str) -> bytes:
    """An HDFS-backed store's `<version>.delta`."""
    return compress(records(ops), codec)


def snapshot_file(ops: Sequence[Op], codec: str) -> bytes:
    """An HDFS-backed store's `<version>.snapshot`: the whole state of the version (what
    Spark loads instead of everything before it), no removals."""
    if any(value is None for _, value in ops):
        raise ValueError("a snapshot file holds no removals")
    return compress(records(sorted(ops)), codec)


def changelog_file(ops: Sequence[Op], codec: str, lineage: Sequence[tuple[int, str]] | None = None) -> bytes:
    """A RocksDB store's changelog without column families: version 1, or with `lineage`
    (checkpoint format 2) version 3."""
    head = b"" if lineage is None else _utf("v3") + _utf(lineage_json(lineage))
    return compress(head + records(ops), codec)
