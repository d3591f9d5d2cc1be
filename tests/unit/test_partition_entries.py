"""A store partition streamed entry by entry (reading/entries.py) holds exactly what the
materialising reader (`RocksPartition.items()`) gives: RocksDB tables whose key ranges
overlap or not, several versions of a key, deletions, merge operands with and without a
value below them, and changelogs (puts, deletions, merges) over all of it. The tables are
stand-ins streaming, as the table reader's `entries()` does, (user key, sequence, type,
value) in RocksDB's order, with or without the key range the MANIFEST gives; the changelogs
are real lz4 streams."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from airflow_provider_streamstate.engine.lookup.formats.rocksdb_manifest import TableRange
from airflow_provider_streamstate.engine.lookup.formats.rocksdb_sst import (
    TYPE_DELETION,
    TYPE_MERGE,
    TYPE_SINGLE_DELETION,
    TYPE_VALUE,
)
from airflow_provider_streamstate.engine.lookup.formats.rocksdb_state import (
    DELETE,
    MERGE,
    PUT,
    DictPartition,
    RocksPartition,
)
from airflow_provider_streamstate.engine.lookup.reading.entries import (
    merged_tables,
    partition_entries,
    resolved_tables,
)
from tests.unit.state_files import lz4_stream
from tests.unit.test_lookup_files import changelog


class Table:
    """A table file as the reader streams it: entries in internal-key order, one at a time;
    its key range when `ranged` (as the MANIFEST gives it)."""

    def __init__(self, entries: list[tuple[bytes, int, int, bytes]], *, ranged: bool = False) -> None:
        self._entries = sorted(entries, key=lambda e: (e[0], -e[1]))
        self.size = len(entries)
        seqs = [e[1] for e in self._entries] or [0]
        self.range = TableRange(0, 0, self.size, self._entries[0][0], self._entries[-1][0], min(seqs),
                                max(seqs)) if ranged and self._entries else None

    def entries(self) -> Iterator[tuple[bytes, int, int, bytes]]:
        yield from self._entries


def random_partition(rng: random.Random, keys: int, tables: int, logs: int, *, ranged: bool = False) -> RocksPartition:
    seq = iter(range(1, 10**9))
    pool = [f"k{rng.randrange(keys * 2):05d}".encode() for _ in range(keys)]
    made = []
    for _ in range(tables):
        entries = []
        for key in rng.sample(pool, rng.randrange(1, len(pool) + 1)):
            for _ in range(rng.choice((1, 1, 1, 2, 3))):  # several versions of a key in one table
                kind = rng.choice((TYPE_VALUE, TYPE_VALUE, TYPE_MERGE, TYPE_DELETION, TYPE_SINGLE_DELETION))
                entries.append((key, next(seq), kind, f"v{rng.randrange(100)}".encode()))
        made.append(Table(entries, ranged=ranged))
    changelogs = []
    for n in range(logs):
        recs = [(rng.choice((PUT, PUT, DELETE, MERGE)), rng.choice(pool + [b"only-in-log"]),
                 f"c{rng.randrange(100)}".encode()) for _ in range(rng.randrange(1, keys + 1))]
        changelogs.append((f"{n + 1}.changelog",
                           lz4_stream(changelog(2, [(k, key, None if k == DELETE else v) for k, key, v in recs]))))
    return RocksPartition(made, changelogs, "lz4")  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", range(40))
def test_streamed_entries_are_exactly_the_materialised_ones(seed: int) -> None:
    rng = random.Random(seed)
    part = random_partition(rng, keys=rng.randrange(1, 60), tables=rng.randrange(0, 4), logs=rng.randrange(0, 3))
    streamed = list(partition_entries(part))
    assert len({k for k, _ in streamed}) == len(streamed)  # each key once
    assert sorted(streamed) == part.items()


def test_tables_whose_key_ranges_do_not_overlap_are_read_one_after_the_other_in_key_order() -> None:
    low = Table([(b"a", 5, TYPE_VALUE, b"1"), (b"b", 6, TYPE_VALUE, b"2")], ranged=True)
    high = Table([(b"c", 1, TYPE_VALUE, b"3"), (b"d", 2, TYPE_DELETION, b"")], ranged=True)
    assert [e[0] for e in merged_tables([high, low])] == [b"a", b"b", b"c", b"d"]  # type: ignore[list-item]


def test_a_key_in_several_tables_is_resolved_newest_first_across_them() -> None:
    older = Table([(b"k", 1, TYPE_VALUE, b"base"), (b"m", 2, TYPE_MERGE, b"x")])
    newer = Table([(b"k", 7, TYPE_MERGE, b"op1"), (b"k", 8, TYPE_MERGE, b"op2"), (b"m", 9, TYPE_DELETION, b"")])
    assert list(resolved_tables([older, newer])) == [  # type: ignore[list-item]
        (b"k", ("V", b"base,op1,op2")), (b"m", ("D", b""))]


def test_an_hdfs_backed_partition_streams_its_dict() -> None:
    part = DictPartition({b"b": b"2", b"a": b"1"})
    assert sorted(partition_entries(part)) == [(b"a", b"1"), (b"b", b"2")]


@pytest.mark.parametrize("seed", range(20))
def test_tables_with_key_ranges_chained_or_merged_give_the_same_entries(seed: int) -> None:
    """With the MANIFEST's key ranges, disjoint tables are read one after the other and
    overlapping ones merged: either way the entries are the materialised ones."""
    rng = random.Random(1000 + seed)
    part = random_partition(rng, keys=rng.randrange(1, 60), tables=rng.randrange(1, 4), logs=rng.randrange(0, 3),
                            ranged=True)
    assert sorted(partition_entries(part)) == part.items()
