"""A RocksDB table read by ranges reads of its bloom filter only the cache line a key hashes
to (64 bytes), not the whole filter, and answers exactly as the table read whole: on the
tables real Spark wrote for the golden checkpoints (every Spark line, format version 5). A
table asked for many keys reads its filter whole once, verified by its checksum, and then
reads no more of it; a damaged filter is found there."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_streamstate.engine.core.errors import CorruptionError
from airflow_provider_streamstate.engine.lookup.formats import rocksdb_sst
from airflow_provider_streamstate.engine.lookup.formats.rocksdb_filter import FILTER_LINE
from airflow_provider_streamstate.engine.lookup.formats.rocksdb_sst import SstFile

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def largest_tables() -> list[Path]:
    """Each Spark line's largest golden table (the most keys and filter lines)."""
    out = []
    for line in sorted(GOLDEN.iterdir()):
        tables = sorted(line.rglob("*.sst"), key=lambda p: p.stat().st_size)
        if tables:
            out.append(tables[-1])
    return out


@pytest.fixture(autouse=True)
def small_tail(monkeypatch) -> None:
    """The golden tables are a few KiB, all inside the first read of a table's tail (32 KiB),
    which then holds its filter whole: read 512 bytes first, as of a table of production size."""
    monkeypatch.setattr(rocksdb_sst, "TAIL_READ", 512)


class CountedReads:
    """A table's bytes read by ranges, each read remembered."""

    def __init__(self, data: bytes) -> None:
        self.data, self.reads = data, []

    def __call__(self, offset: int, length: int) -> bytes:
        self.reads.append((offset, length))
        return self.data[offset:offset + length]


def filter_reads(reads: list[tuple[int, int]], table: SstFile) -> list[tuple[int, int]]:
    fh = table._filter_handle  # noqa: SLF001
    return [(o, n) for o, n in reads if fh.offset <= o < fh.offset + fh.size - 5]


@pytest.mark.parametrize("path", largest_tables(), ids=lambda p: p.parts[-7])
def test_a_ranged_table_reads_one_filter_line_a_key_and_answers_as_the_whole_table(path: Path) -> None:
    data = path.read_bytes()
    whole = SstFile(data, path.name)
    reads = CountedReads(data)
    ranged = SstFile(reads, path.name, size=len(data))
    assert ranged.filter is not None and ranged.filter.kind == whole.filter.kind == "fast"
    assert filter_reads(reads.reads, ranged) == []  # opening reads the filter's 5-byte shape only
    assert ranged.meta_bytes < whole.meta_bytes
    keys = [e[0] for e in whole.entries()]
    absent = [k + b"\x00" for k in keys] + [b"no-such-key-%d" % i for i in range(200)]
    assert sum(whole.may_contain(k) for k in absent) < len(absent) / 2  # the filter rules most out
    for key in keys + absent:
        reads.reads.clear()
        lines_cached = set(ranged._filter_lines)  # noqa: SLF001
        assert ranged.scan(key, None, reads) == whole.scan(key, None)
        assert ranged.may_contain(key) == whole.may_contain(key)
        got = filter_reads(reads.reads, ranged)
        line, _ = ranged.filter.line_of(key)
        if line in lines_cached or ranged.filter.data is not None:
            assert got == []
        else:
            fh = ranged._filter_handle  # noqa: SLF001
            assert got == [(fh.offset + line * FILTER_LINE, FILTER_LINE)]
        data_reads = [r for r in reads.reads if r not in got]
        assert len(data_reads) <= 1 and (whole.may_contain(key) or data_reads == [])


def test_many_keys_read_the_filter_whole_once_and_a_damaged_filter_is_found(monkeypatch) -> None:
    monkeypatch.setattr(rocksdb_sst, "FILTER_LINES_BEFORE_WHOLE", 3)
    path = max(largest_tables(), key=lambda p: SstFile(p.read_bytes(), p.name).filter.lines)
    data = path.read_bytes()
    whole = SstFile(data, path.name)
    keys = [e[0] for e in whole.entries()]
    assert whole.filter is not None and whole.filter.lines > 4
    by_line: dict[int, bytes] = {}
    for k in keys:
        by_line.setdefault(whole.filter.line_of(k)[0], k)
    assert len(by_line) > 4
    reads = CountedReads(data)
    ranged = SstFile(reads, path.name, size=len(data))
    fh = ranged._filter_handle  # noqa: SLF001
    for n, key in enumerate(by_line.values()):
        reads.reads.clear()
        assert ranged.scan(key, None, reads) == whole.scan(key, None)
        got = filter_reads(reads.reads, ranged)
        if n < 3:
            assert [length for _, length in got] == [FILTER_LINE]
        elif n == 3:  # the fourth line: the whole filter with its trailer, once
            assert got == [(fh.offset, fh.size + 5)] and ranged.filter.data is not None
        else:
            assert got == []
    damaged = bytearray(data)
    damaged[fh.offset + fh.size - 6] ^= 0xFF  # the filter's last line, outside its 5-byte shape
    reads = CountedReads(bytes(damaged))
    ranged = SstFile(reads, path.name, size=len(data))
    with pytest.raises(CorruptionError, match="checksum does not match"):
        for key in by_line.values():
            ranged.scan(key, None, reads)


def test_a_table_whose_filter_is_in_its_first_tail_read_takes_the_filter_from_it(monkeypatch) -> None:
    monkeypatch.setattr(rocksdb_sst, "TAIL_READ", 32 << 10)
    path = min(largest_tables(), key=lambda p: p.stat().st_size)
    data = path.read_bytes()
    assert len(data) <= 32 << 10
    reads = CountedReads(data)
    ranged = SstFile(reads, path.name, size=len(data))
    assert reads.reads == [(0, len(data))]  # one read, the filter in it, verified and kept
    assert ranged.filter is not None and ranged.filter.data is not None
    whole = SstFile(data, path.name)
    for key in [e[0] for e in whole.entries()] + [b"no-such-key"]:
        reads.reads.clear()
        assert ranged.scan(key, None, reads) == whole.scan(key, None)
        assert filter_reads(reads.reads, ranged) == []
