"""The pieces a key lookup reads RocksDB tables by ranges with: the hashes RocksDB's bloom
filters use give RocksDB's own published values (its `hash_test.cc`: XXPH3 for format
version 5+, the legacy 32-bit hash for older tables); snappy blocks decode; a MANIFEST that
does not describe exactly Spark's tables gives no key ranges (every table is consulted);
stores and checkpoint filesystems read a range of a file; and a lookup's byte budget refuses
a read before it happens."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from airflow_provider_streamstate.backends.local.checkpoint import LocalCheckpointFS
from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.checkpoint.filesystems.base import FileStat
from airflow_provider_streamstate.engine.core.errors import (
    CheckpointChanged,
    CorruptionError,
    ReadBudgetExceeded,
)
from airflow_provider_streamstate.engine.lookup.formats.rocksdb_blocks import snappy_decompress
from airflow_provider_streamstate.engine.lookup.formats.rocksdb_filter import legacy_hash, xxph3
from airflow_provider_streamstate.engine.lookup.formats.rocksdb_manifest import table_ranges
from airflow_provider_streamstate.engine.lookup.reading.partitions import Reads
from airflow_provider_streamstate.engine.lookup.reading.sources import StateFile, StateSource

# RocksDB's util/hash_test.cc, Hash64SmallValueSchema: Hash64(data, n, 0).
HASH64 = [
    (b"", 5999572062939766020), (b"\x08", 583283813901344696), (b"\x9a", 16322991629225003903),
    (b"\x4d\x76", 6859542833406258115), (b"\x30\x46\x0b", 11404699285340020889),
    (b"\x67\x53\x81\x1c", 9010661983527562386), (b"\xd0\x7a\x6e\xea\x56", 6384167718754869899),
    (b"\x5c\xbe\x97\x75\x54\x9a\x52", 5716522398211028826),
    (b"\x31\x1b\x98\x75\x96\x22\xd3\x9a", 9844314944338447628),
    (b"\x1a\xb5\xd0\xfe\xab\xc3\x61\xb2\x99", 13253403748084181481),
    (b"\xbd\x2c\x63\x38\xbf\xe9\x78\xb7\xbf\x15", 10551812464348219044),
]
# Hash64LargeValueSchema: a character per length 0..429 of the hash of "Rocks" repeated.
ROCKS_DESCRIPTOR = (
    "c1EeRkrzgOYWLA8PuhJrwTePJewoB44WdXYDfhbk3ZxTqqg25WlPExDl7IKIQLJvnA6gJxxn"
    "9TCSLkFGfJeXehaSS1GBqWSzfhEH4VXiXIUCuxJXxtKXcSC6FrNIQGTZbYDiUOLD6Y5inzrF"
    "9etwQhXUBanw55xAUdNMFQAm2GjJ6UDWp2mISLiMMkLjANWMKLaZMqaFLX37qB4MRO1ooVRv"
    "zSvaNRSCLxlggQCasQq8icWjzf3HjBlZtU6pd4rkaUxSzHqmo9oM5MghbU5Rtxg8wEfO7lVN"
    "5wdMONYecslQTwjZUpO1K3LDf3K3XK6sUXM6ShQQ3RHmMn2acB4YtTZ3QQcHYJSOHn2DuWpa"
    "Q8RqzX5lab92YmOLaCdOHq1BPsM7SIBzMdLgePNsJ1vvMALxAaoDUHPxoFLO2wx18IXnyX")
# Values: Hash(data, n, 0xbc9f1d34), the legacy bloom filters' hash.
LEGACY = [
    (b"\x1a\xb5\xd0\xfe\xab\xc3\x61\xb2\x99", 2706087434),
    (b"\x22\x6f\x39\x1f\xf8\xdd\x4f\x52\x17\x94", 3420325137),
    (b"\xbd\x2c\x63\x38\xbf\xe9\x78\xb7\xbf\x15", 3382479516),
    (b"\x80\xd4\x3b\x3b\xae\x22\xa2\x78", 3563570120),
]


@pytest.mark.parametrize(("data", "expected"), HASH64)
def test_the_bloom_hash_of_format_5_tables_is_rocksdbs_hash64(data: bytes, expected: int) -> None:
    assert xxph3(data) == expected


def test_the_bloom_hash_holds_for_every_length_up_to_430_bytes() -> None:
    """Lengths 17-128, 129-240 and the long path are computed differently; RocksDB pins them."""
    alphabet = "abcdefghijklmnopqrstuvwxyz123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    data = (b"Rocks" * 100)[:430]
    assert "".join(alphabet[xxph3(data[:n]) % 61] for n in range(430)) == ROCKS_DESCRIPTOR


@pytest.mark.parametrize(("data", "expected"), LEGACY)
def test_the_bloom_hash_of_older_tables_is_rocksdbs_legacy_hash(data: bytes, expected: int) -> None:
    assert legacy_hash(data) == expected


def test_a_snappy_block_decodes_literals_and_overlapping_copies() -> None:
    # length 12 | literal "abc" (tag (3-1)<<2) | copy 1-byte offset: 9 bytes from 3 back
    stream = bytes([12, (3 - 1) << 2]) + b"abc" + bytes([((9 - 4) << 2) | 1, 3])
    assert snappy_decompress(stream, "t") == b"abcabcabcabc"
    with pytest.raises(CorruptionError, match="snappy"):
        snappy_decompress(bytes([12, 8]) + b"abc" + bytes([((9 - 4) << 2) | 1, 9]), "t")  # copy from before the start


def test_a_manifest_that_does_not_name_exactly_sparks_tables_gives_no_ranges() -> None:
    assert table_ranges(b"", {}) == {}
    assert table_ranges(b"", {12: 100}) is None
    assert table_ranges(b"\x00" * 3 + b"garbage that is no log record", {12: 100}) is None


def test_stores_and_checkpoints_read_a_range_of_a_file(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    data = bytes(range(256)) * 40
    digest, _, _ = store.store_file(_write(tmp_path / "blob", data))
    assert store.read_blob_range(digest, 1000, 300) == data[1000:1300]
    assert store.read_blob_range(digest, len(data) - 10, 300) == data[-10:]
    ckpt = tmp_path / "ckpt"
    _write(ckpt / "state" / "f", data)
    fs = LocalCheckpointFS(ckpt)
    st = fs.stat("state/f")
    assert st is not None and fs.read_range("state/f", st, 5, 7) == data[5:12]
    _write(ckpt / "state" / "f", data + b"more")
    with pytest.raises(CheckpointChanged):
        fs.read_range("state/f", st, 5, 7)
    assert fs.read_range("state/f", FileStat(len(data) + 4, 0), 5, 7) == data[5:12]


class _Counting(StateSource):
    description = "a counting source"

    def __init__(self, data: bytes) -> None:
        self.data, self.reads = data, 0

    def read(self, f: StateFile) -> bytes:
        self.reads += 1
        return self.data

    def read_range(self, f: StateFile, offset: int, length: int) -> bytes:
        self.reads += 1
        return self.data[offset:offset + length]


def test_a_byte_budget_refuses_a_read_before_it_is_sent() -> None:
    src = _Counting(b"x" * 1000)
    f = StateFile("state/0/1/1.delta", 1000, ("sha256", "0" * 64))
    reads = Reads(max_bytes=1500)
    assert reads.read_range(src, f, 0, 600) == b"x" * 600
    with pytest.raises(ReadBudgetExceeded, match=r"budget of 1,500 bytes \(600 bytes read, 1,000 bytes more"):
        reads.read(src, f)
    assert (src.reads, reads.bytes, reads.requests) == (1, 600, 1)
    assert reads.read_range(src, f, 600, 400) and reads.bytes == 1000 and reads.files == [f.path]


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000))
    return path


def test_a_lookup_past_its_byte_budget_is_refused_in_one_line_and_within_it_answers(tmp_path: Path) -> None:
    from airflow_provider_streamstate.engine.lookup import PartitionCache, lookup_key
    from tests.unit.state_files import Aggregation

    agg = Aggregation(tmp_path / "ckpt", partitions=3)
    for n in range(1, 4):
        agg.commit({"a": n, "b": n})
    with pytest.raises(ReadBudgetExceeded) as err:
        lookup_key(str(agg.root), key="a", cache=PartitionCache(), max_bytes=10)
    assert "more than its budget of 10 bytes" in err.value.one_line() and "\n" not in err.value.one_line()
    hit = lookup_key(str(agg.root), key="a", cache=PartitionCache(), max_bytes=1 << 20)
    assert hit.found and hit.value == {"n": 3} and 0 < hit.bytes_read <= 1 << 20
