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
from collections.abc import Iterator, Sequence
from typing import Any

from airflow_provider_streamstate.engine.lookup.formats.rocksdb_sst import TYPE_MERGE, TYPE_VALUE
from airflow_provider_streamstate.engine.lookup.formats.rocksdb_state import (
    DictPartition,
    Merges,
    RocksPartition,
    Table,
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


def merged_tables(tables: Sequence[Table]) -> Iterator[Entry]:
    """The entries of several tables in internal-key order: user key ascending, then newest
    (highest sequence) first. Each table is streamed a block at a time (`Table.entries`);
    tables whose key ranges (from the MANIFEST) do not overlap are read one after the other,
    others merged by key."""
    if len(tables) == 1:
        return tables[0].entries()
    ranges = [t.range for t in tables]
    if all(r is not None for r in ranges):
        ordered = sorted(tables, key=lambda t: t.range.smallest if t.range else b"")
        if all(a.range.largest < b.range.smallest  # type: ignore[union-attr]
               for a, b in zip(ordered, ordered[1:], strict=False)):
            return (e for t in ordered for e in t.entries())
    return heapq.merge(*(t.entries() for t in tables), key=lambda e: (e[0], -e[1]))


def resolved_tables(tables: Sequence[Table]) -> Iterator[tuple[bytes, tuple[str, Any]]]:
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
