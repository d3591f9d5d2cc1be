"""Every entry of a decoded store partition, streamed: what a whole-state pass (a digest)
reads, without a list of the partition's entries or a sort of them.

A RocksDB partition is its tables with the changelogs after them overlaid
(`RocksPartition`). Each table is in internal-key order (user key ascending, newest
sequence first), so a k-way merge of the tables (a plain chain when their key ranges do not
overlap, as compacted levels do not) yields each user key's versions together, newest
first: resolving them as a read does (a value, a deletion, merge operands on either) needs
one key's versions at a time. The changelog overlay, a dict, has the last word on the keys
it holds; its keys the tables lack come after the tables' keys. So the entries come in key
order from the tables and then in the overlay's order: whoever needs an order sorts.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from typing import Any

from airflow_provider_streamstate.engine.lookup.formats.rocksdb_sst import (
    TYPE_MERGE,
    TYPE_VALUE,
    SstFile,
)
from airflow_provider_streamstate.engine.lookup.formats.rocksdb_state import (
    DictPartition,
    Merges,
    RocksPartition,
)

Entry = tuple[bytes, int, int, bytes]  # (user key, sequence, value type, value): a table's entry
_ABSENT = object()


def partition_entries(part: Any) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) of every live entry of a decoded partition (`partition_state`), each once."""
    if isinstance(part, RocksPartition):
        return _rocks_entries(part)
    if isinstance(part, DictPartition):
        return iter(part.state.items())
    raise TypeError(f"not a decoded partition: {type(part).__name__}")


def _table_entries(table: SstFile) -> Iterable[Entry]:
    """One table's entries in its order. `scan_all` builds the table's list; a streaming scan
    of the table reader (one block at a time) is the drop-in replacement here: `merged_tables`
    takes iterators too (it then always merges by key)."""
    return table.scan_all()


def merged_tables(tables: list[SstFile]) -> Iterator[Entry]:
    """The entries of several tables in internal-key order: user key ascending, then newest
    (highest sequence) first."""
    scans = [_table_entries(t) for t in tables]
    if len(scans) == 1:
        return iter(scans[0])
    lists = [s for s in scans if isinstance(s, list)]
    if len(lists) == len(scans):
        ranged = sorted((s for s in lists if s), key=lambda s: s[0][0])
        if all(a[-1][0] < b[0][0] for a, b in zip(ranged, ranged[1:], strict=False)):
            return (e for s in ranged for e in s)  # disjoint key ranges: one after the other
    return heapq.merge(*scans, key=lambda e: (e[0], -e[1]))


def resolved_tables(tables: list[SstFile]) -> Iterator[tuple[bytes, tuple[str, Any]]]:
    """Each user key of the tables once, in key order, with what a read of the tables sees:
    ("V", value), ("D", b"") for a deleted key, or ("M", operands oldest first) for merge
    operands with nothing below them (rocksdb_sst.resolve, one key at a time)."""
    key: bytes | None = None
    state: tuple[str, Any] | None = None
    operands: list[bytes] = []
    for ukey, _seq, kind, value in merged_tables(tables):
        if ukey != key:
            if key is not None:
                yield key, state if state is not None else ("M", operands[::-1])
            key, state, operands = ukey, None, []
        if state is not None:
            continue  # an older version, under what the newer ones decided
        if kind == TYPE_MERGE:
            operands.append(value)
        elif kind == TYPE_VALUE:
            state = ("V", b",".join([value, *operands[::-1]]) if operands else value)
        else:  # a deletion: merge operands above it start from nothing
            state = ("V", b",".join(operands[::-1])) if operands else ("D", b"")
    if key is not None:
        yield key, state if state is not None else ("M", operands[::-1])


def _rocks_entries(part: RocksPartition) -> Iterator[tuple[bytes, bytes]]:
    overlay: dict[bytes, Any] = part.overlay
    seen: set[bytes] = set()  # overlay keys the tables hold too
    for key, (kind, below) in resolved_tables(part.tables):
        o: Any = overlay.get(key, _ABSENT) if overlay else _ABSENT
        if o is _ABSENT:
            if kind == "V":
                yield key, below
            elif kind == "M":
                yield key, b",".join(below)
            continue
        seen.add(key)
        if o is None:
            continue
        if isinstance(o, Merges):
            ops = b",".join(o)
            value = b",".join(below) if kind == "M" else below if kind == "V" else None
            yield key, ops if value is None else value + b"," + ops
        else:
            yield key, o
    for key, o in overlay.items():
        if key in seen or o is None:
            continue
        yield key, b",".join(o) if isinstance(o, Merges) else o
