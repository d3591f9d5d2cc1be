"""The RocksDB state store's files: one partition's state at a version.

Version V of a partition is a RocksDB checkpoint `<s>.zip` (s <= V, or none) with the
changelogs `<s+1..V>.changelog` replayed on it (checkpoint format v2: `<v>_<id>.zip` and
`.changelog` along the lineage the commit log names). The cut planner picks exactly these
files; this module reads them:

- the zip holds `metadata` (`v1` then JSON: `sstFiles` [{localFileName, dfsSstFileName,
  sizeBytes}], `numKeys`, `columnFamilyMapping` {name: id}, ...), RocksDB's MANIFEST (each
  table's key range and sequence numbers: `rocksdb_manifest`), CURRENT and OPTIONS, and the
  (empty: Spark writes with the WAL off) log files; the table files themselves are shared,
  `SSTs/<dfsSstFileName>`, and read only as a key needs them (`RocksPartition`);
- a changelog is the codec's stream (`codec`) of records, integers big-endian. Version 1
  (no header): `key size | key | value size | value`, a delete with value size -1, -1 at
  the end. Version 2: `writeUTF("v2")`, then `type (1) | key size | key | value size |
  value`, type 0x01 put, 0x10 delete (value size -1), 0x11 merge, 0x00 end. Versions 3
  and 4 are 1 and 2 with `writeUTF("v3"/"v4")` and the lineage as a `writeUTF` JSON
  array after it (checkpoint format v2);
- a merge appends its operand to the value with ',' between (StringAppendOperator).

Keys are as Spark's encoders write them (`rocksdb_keys`); this module only sees bytes.
"""

from __future__ import annotations

import copy
import io
import json
import struct
import zipfile
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from airflow_provider_streamstate.engine.core.errors import CorruptionError, UnsupportedCheckpointError
from airflow_provider_streamstate.engine.lookup.formats.codec import decompress
from airflow_provider_streamstate.engine.lookup.formats.rocksdb_manifest import TableRange, table_ranges
from airflow_provider_streamstate.engine.lookup.formats.rocksdb_sst import TYPE_MERGE, Entry, resolve

_INT = struct.Struct(">i")
PUT, DELETE, MERGE, EOF = 0x01, 0x10, 0x11, 0x00


def read_zip_metadata(data: bytes, where: str) -> dict[str, Any]:
    """The `metadata` of a RocksDB checkpoint zip; a non-empty WAL in it is refused."""
    return read_zip(data, where)[0]


def read_zip(data: bytes, where: str) -> tuple[dict[str, Any], dict[str, TableRange] | None]:
    """(the `metadata` of a RocksDB checkpoint zip, each table's key range by its DFS file
    name from the zip's MANIFEST, or None when that cannot be read)."""
    manifest = b""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            for info in z.infolist():
                if info.filename.endswith(".log") and info.file_size:
                    raise UnsupportedCheckpointError(
                        f"{where} holds a non-empty RocksDB write-ahead log {info.filename}",
                        hint="Spark writes its state with the WAL off; read this state with Spark")
            lines = z.read("metadata").decode("utf-8").split("\n")
            current = z.read("CURRENT").decode("utf-8").strip() if "CURRENT" in z.namelist() else ""
            if current.startswith("MANIFEST-") and current in z.namelist():
                manifest = z.read(current)  # checked against the zip's CRC-32
    except (zipfile.BadZipFile, KeyError, EOFError, UnicodeDecodeError, zipfile.LargeZipFile) as exc:
        raise CorruptionError(f"{where} is not a readable RocksDB checkpoint zip: {exc}",
                              hint="restore an older snapshot, or re-read the checkpoint") from None
    if not lines or lines[0] != "v1" or len(lines) < 2:
        raise UnsupportedCheckpointError(f"{where} has RocksDB checkpoint metadata version {lines[0][:10]!r}",
                                         hint="key lookups read metadata v1 (Spark 3.2 to 4.1)")
    try:
        meta = json.loads(lines[1])
    except ValueError as exc:
        raise CorruptionError(f"{where} has unreadable RocksDB metadata: {exc}") from None
    if meta.get("logFiles"):
        nonempty = [f for f in meta["logFiles"] if int(f.get("sizeBytes", 0))]
        if nonempty:
            raise UnsupportedCheckpointError(f"{where} names non-empty RocksDB write-ahead logs",
                                             hint="Spark writes its state with the WAL off; read this state with Spark")
    return dict(meta), _ranges(meta, manifest)


def _ranges(meta: dict[str, Any], manifest: bytes) -> dict[str, TableRange] | None:
    if not manifest:
        return None
    try:
        by_number = {int(str(f["localFileName"]).split(".")[0]): str(f["dfsSstFileName"])
                     for f in meta.get("sstFiles") or []}
        sizes = {int(str(f["localFileName"]).split(".")[0]): int(f["sizeBytes"]) for f in meta.get("sstFiles") or []}
    except (KeyError, ValueError, TypeError):
        return None
    ranges = table_ranges(manifest, sizes)
    return None if ranges is None else {by_number[n]: r for n, r in ranges.items()}


class Merges(list):  # type: ignore[type-arg]
    """Merge operands (oldest first) of a key whose base value is below the changelogs."""


def changelog_lineage(data: bytes, where: str) -> list[tuple[int, str]]:
    """The lineage a decompressed changelog of version 3 or 4 carries (checkpoint format 2:
    the versions below it, each with its unique id, from the snapshot it builds on), as
    Spark's loader reads it; empty for versions 1 and 2, which carry none."""
    if len(data) < 2:
        return []
    (ulen,) = struct.unpack_from(">H", data, 0)
    if data[2:2 + ulen] not in (b"v3", b"v4"):
        return []
    pos = 2 + ulen
    if pos + 2 > len(data):
        raise _truncated(where)
    (jlen,) = struct.unpack_from(">H", data, pos)
    try:
        entries = json.loads(data[pos + 2:pos + 2 + jlen].decode("utf-8"))
        return [(int(e["version"]), str(e["checkpointUniqueId"])) for e in entries]
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptionError(f"{where} has an unreadable lineage: {exc}") from None


def parse_changelog(data: bytes, where: str) -> tuple[int, list[tuple[int, bytes, bytes]]]:
    """(changelog version, [(record type, key, value)]) of a decompressed changelog."""
    records: list[tuple[int, bytes, bytes]] = []
    version = apply_changelog({}, data, where, records)
    return version, records


def apply_changelog(overlay: dict[bytes, Any], data: bytes, where: str,
                    records: list[tuple[int, bytes, bytes]] | None = None) -> int:
    """Apply a decompressed changelog to `overlay` (key -> value bytes, None when deleted,
    or `Merges` still to be put on the value below); with `records`, list them instead.
    Returns the changelog's version."""
    pos = 0
    version = 1
    n = len(data)
    if n >= 2:
        (ulen,) = struct.unpack_from(">H", data, 0)
        head = data[2:2 + ulen]
        if head.startswith(b"v") and head[1:].isdigit():  # what Spark's reader factory checks
            version = int(head[1:])
            pos = 2 + ulen
    if version not in (1, 2, 3, 4):
        raise UnsupportedCheckpointError(f"{where} is a state changelog of version {version}",
                                         hint="key lookups read changelog versions 1 to 4")
    if version in (3, 4):  # the lineage (checkpoint format v2): `changelog_lineage` reads it
        if pos + 2 > n:
            raise _truncated(where)
        (ulen,) = struct.unpack_from(">H", data, pos)
        pos += 2 + ulen
    typed = version in (2, 4)
    unpack = _INT.unpack_from
    try:
        while True:
            kind = PUT
            if typed:
                kind = data[pos]
                pos += 1
                if kind == EOF:
                    break
                if kind not in (PUT, DELETE, MERGE):
                    raise CorruptionError(f"{where} is damaged: unknown record type {kind:#x} at byte {pos - 1}")
            (ksize,) = unpack(data, pos)
            pos += 4
            if ksize < 0:
                if not typed and ksize == -1:
                    break
                raise _truncated(where)
            end = pos + ksize
            key = data[pos:end]
            (vsize,) = unpack(data, end)
            pos = end + 4
            if vsize < 0:
                if records is None:
                    overlay[key] = None
                else:
                    records.append((DELETE, key, b""))
                continue
            end = pos + vsize
            if end > n:
                raise _truncated(where)
            value = data[pos:end]
            pos = end
            if records is not None:
                records.append((kind, key, value))
            elif kind == PUT:
                overlay[key] = value
            else:
                old = overlay.get(key, _ABSENT)
                if old is _ABSENT:
                    overlay[key] = Merges([value])
                elif old is None:
                    overlay[key] = value
                elif isinstance(old, Merges):
                    old.append(value)
                else:
                    overlay[key] = old + b"," + value
    except (IndexError, struct.error):
        raise _truncated(where) from None
    if pos != n:
        raise CorruptionError(f"{where} has {n - pos} bytes after its end record")
    return version


_ABSENT = object()


def _truncated(where: str) -> CorruptionError:
    return CorruptionError(f"{where} is truncated: its records end without the end marker",
                           hint="restore an older snapshot, or re-read the checkpoint")


def successor(prefix: bytes) -> bytes | None:
    """The smallest byte string greater than every string starting with `prefix`."""
    p = bytearray(prefix)
    while p and p[-1] == 0xFF:
        p.pop()
    if not p:
        return None
    p[-1] += 1
    return bytes(p)


class Table(Protocol):
    """A table of a partition as the partition reads it (engine/lookup/reading/partitions.py
    opens it on first use): its size, its key range when the MANIFEST gave one, and reads."""

    size: int
    range: TableRange | None

    def scan(self, lo: bytes, hi: bytes | None) -> list[Entry]: ...

    def entries(self) -> Iterator[Entry]: ...


class RocksPartition:
    """A partition's state: its table files, with the changelogs after them overlaid. A key
    the changelogs decide is answered from them; else the tables whose key range holds it
    are asked, newest first, until one holds a put or deletion newer than every table left."""

    def __init__(self, tables: Sequence[Table], changelogs: list[tuple[str, bytes]], codec: str,
                 column_families: dict[str, int] | None = None, *, refs: Sequence[Any] = ()) -> None:
        self.tables = list(tables)
        self.refs = list(refs)  # what a cached partition keeps of its tables: their files, opened per lookup
        self.column_families = column_families or {}
        self.overlay: dict[bytes, Any] = {}
        self._sorted: list[bytes] | None = None
        self.changelog_bytes = 0
        self.table_bytes = sum(t.size for t in self.tables or self.refs)
        self._apply(changelogs, codec)

    def _apply(self, changelogs: list[tuple[str, bytes]], codec: str) -> None:
        for name, raw in changelogs:
            data = decompress(raw, codec, name)
            self.changelog_bytes += len(data)
            apply_changelog(self.overlay, data, name)
        self._sorted = None

    def with_tables(self, tables: Sequence[Table]) -> RocksPartition:
        """The same partition reading its tables through `tables` (the same files, opened
        for another lookup): the overlay is shared, never changed."""
        out = copy.copy(self)
        out.tables = list(tables)
        return out

    def extended(self, changelogs: list[tuple[str, bytes]], codec: str) -> RocksPartition:
        """This partition with more changelogs applied (a later version on the same tables);
        this one is left as it is."""
        out = RocksPartition(self.tables, [], codec, self.column_families, refs=self.refs)
        out.overlay = {k: Merges(v) if isinstance(v, Merges) else v for k, v in self.overlay.items()}
        out.changelog_bytes = self.changelog_bytes
        out._apply(changelogs, codec)
        return out

    def _tables(self, lo: bytes, hi: bytes | None) -> dict[bytes, tuple[str, Any]]:
        candidates = [t for t in self.tables if t.range is None or t.range.holds(lo, hi)]
        if hi is None and all(t.range is not None for t in candidates):
            candidates.sort(key=lambda t: t.range.largest_seq if t.range else 0, reverse=True)
            entries: list[Entry] = []
            decided = -1  # the newest put or deletion of the key seen so far
            for t in candidates:
                assert t.range is not None
                if t.range.largest_seq < decided:
                    continue  # everything in it is older than what decides the key
                for e in t.scan(lo, None):
                    entries.append(e)
                    if e[2] != TYPE_MERGE:
                        decided = max(decided, e[1])
            return resolve(entries)
        entries = []
        for t in candidates:
            entries.extend(t.scan(lo, hi))
        return resolve(entries)

    @staticmethod
    def _table_value(state: tuple[str, Any] | None) -> bytes | None:
        if state is None or state[0] == "D":
            return None
        return bytes(state[1]) if state[0] == "V" else b",".join(state[1])

    def _value(self, key: bytes, tables: dict[bytes, tuple[str, Any]] | None = None) -> bytes | None:
        """The key's value: the changelogs' last word on it, on top of the tables."""
        o = self.overlay.get(key, _ABSENT)
        if o is None or isinstance(o, bytes):
            return o
        below = self._table_value((tables if tables is not None else self._tables(key, None)).get(key))
        if o is _ABSENT:
            return below
        ops = b",".join(o)
        return ops if below is None else below + b"," + ops

    def get(self, key: bytes) -> bytes | None:
        return self._value(key)

    def items(self) -> list[tuple[bytes, bytes]]:
        """Every entry of the partition (key, value), in key order."""
        entries: list[Entry] = []
        for t in self.tables:
            entries.extend(t.entries())
        tables = resolve(entries)
        keys = set(tables) | set(self.overlay)
        out = ((k, self._value(k, tables)) for k in keys)
        return sorted((k, v) for k, v in out if v is not None)

    def scan_prefix(self, prefix: bytes) -> list[tuple[bytes, bytes]]:
        if not prefix:
            return self.items()
        tables = self._tables(prefix, successor(prefix))
        if self._sorted is None:
            self._sorted = sorted(self.overlay)
        i = bisect_left(self._sorted, prefix)
        keys = set(tables)
        while i < len(self._sorted) and self._sorted[i].startswith(prefix):
            keys.add(self._sorted[i])
            i += 1
        out = ((k, self._value(k, tables)) for k in keys)
        return sorted((k, v) for k, v in out if v is not None)


class DictPartition:
    """A partition already decoded to a dict (the HDFS-backed store)."""

    def __init__(self, state: dict[bytes, bytes]) -> None:
        self.state = state
        self.size = 0  # bytes of the files it was decoded from (what a cache bounds)
        self._sorted: list[bytes] | None = None
        self.column_families: dict[str, int] = {}

    def get(self, key: bytes) -> bytes | None:
        return self.state.get(key)

    def items(self) -> list[tuple[bytes, bytes]]:
        return sorted(self.state.items())

    def scan_prefix(self, prefix: bytes) -> list[tuple[bytes, bytes]]:
        if self._sorted is None:
            self._sorted = sorted(self.state)
        i = bisect_left(self._sorted, prefix)
        out = []
        while i < len(self._sorted) and self._sorted[i].startswith(prefix):
            out.append((self._sorted[i], self.state[self._sorted[i]]))
            i += 1
        return out
