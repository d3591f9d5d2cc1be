"""The state file formats key lookups read, on files built here byte by byte as Spark's
writers lay them out: the lz4 codec's block stream (checksums, truncation), HDFS-backed
snapshots and deltas (a removal wins), RocksDB changelogs of each version (put, delete,
merge) over a partition's tables, and the schema files."""

from __future__ import annotations

import struct

import pytest

from airflow_provider_streamstate.engine.core.errors import CorruptionError, UnsupportedCheckpointError
from airflow_provider_streamstate.engine.lookup.encodings.rocksdb_keys import (
    multiple_values,
    prefix_scan_key,
    split_prefix_key,
)
from airflow_provider_streamstate.engine.lookup.encodings.schema import read_schema_v2, read_schema_v3
from airflow_provider_streamstate.engine.lookup.formats.codec import decompress
from airflow_provider_streamstate.engine.lookup.formats.hdfs_state import load_partition
from airflow_provider_streamstate.engine.lookup.formats.rocksdb_state import (
    DELETE,
    MERGE,
    PUT,
    RocksPartition,
    parse_changelog,
    successor,
)
from tests.unit.state_files import lz4_stream, records, utf


def test_the_lz4_block_stream_is_read_and_checked() -> None:
    data = bytes(range(256)) * 5
    stream = lz4_stream(data)
    assert decompress(stream, "lz4", "f") == data
    with pytest.raises(CorruptionError, match="f is truncated"):
        decompress(stream[:-21], "lz4", "f")
    damaged = bytearray(stream)
    damaged[21 + 5] ^= 0xFF  # inside the first (compressed) block
    with pytest.raises(CorruptionError, match="f is damaged"):
        decompress(bytes(damaged), "lz4", "f")
    with pytest.raises(UnsupportedCheckpointError, match="snappy"):
        decompress(stream, "snappy", "f")


def test_a_delta_removing_a_key_hides_it_and_a_later_put_brings_it_back() -> None:
    snapshot = lz4_stream(records((b"a", b"1"), (b"b", b"2"), (b"c", b"3")))
    d1 = lz4_stream(records((b"a", None), (b"b", b"20")))
    d2 = lz4_stream(records((b"c", None), (b"c", b"30"), (b"d", b"4")))
    state = load_partition([("4.snapshot", snapshot), ("5.delta", d1), ("6.delta", d2)], "lz4")
    assert state == {b"b": b"20", b"c": b"30", b"d": b"4"}
    with pytest.raises(CorruptionError, match="4.snapshot is damaged: a snapshot file holds a removal"):
        load_partition([("4.snapshot", d1)], "lz4")
    with pytest.raises(CorruptionError, match="5.delta is truncated"):
        load_partition([("5.delta", lz4_stream(records((b"a", b"1"))[:-4]))], "lz4")


def changelog(version: int, recs: list[tuple[int, bytes, bytes | None]]) -> bytes:
    out = bytearray()
    if version >= 2:
        out += utf(f"v{version}")
    if version >= 3:
        out += utf('[{"version":1,"checkpointUniqueId":"x"}]')
    for kind, k, v in recs:
        if version in (2, 4):
            out.append(kind)
        out += struct.pack(">i", len(k)) + k
        out += struct.pack(">i", -1) if v is None else struct.pack(">i", len(v)) + v
    out += b"\x00" if version in (2, 4) else struct.pack(">i", -1)
    return bytes(out)


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_changelogs_of_every_version(version: int) -> None:
    recs = [(PUT, b"k1", b"v1"), (DELETE, b"k2", None), (PUT, b"k3", b"v3")]
    if version in (2, 4):
        recs.append((MERGE, b"k3", b"v4"))
    got_version, got = parse_changelog(changelog(version, recs), "1.changelog")
    assert got_version == version
    assert [(k, key, v) for k, key, v in got] == [(k, key, v or b"") for k, key, v in recs]
    with pytest.raises(CorruptionError, match="1.changelog"):
        parse_changelog(changelog(version, recs)[:-3], "1.changelog")


def test_changelogs_overlay_puts_deletes_and_merges_in_order() -> None:
    log1 = lz4_stream(changelog(2, [(PUT, b"a", b"1"), (MERGE, b"l", b"x"), (MERGE, b"m", b"p")]))
    log2 = lz4_stream(changelog(2, [(MERGE, b"l", b"y"), (DELETE, b"a", None), (DELETE, b"m", None),
                                    (MERGE, b"m", b"q"), (PUT, b"z", b"9")]))
    part = RocksPartition([], [("1.changelog", log1), ("2.changelog", log2)], "lz4")
    assert part.get(b"a") is None
    assert part.get(b"l") == b"x,y"
    assert part.get(b"m") == b"q"
    assert part.get(b"z") == b"9"
    assert part.scan_prefix(b"") == [(b"l", b"x,y"), (b"m", b"q"), (b"z", b"9")]
    assert successor(b"ab\xff") == b"ac" and successor(b"\xff") is None


def test_list_state_values_and_prefix_keys() -> None:
    rows = [b"\x00" + b"r1" * 4, b"\x00" + b"row2" * 2]
    merged = b",".join(struct.pack("<i", len(r)) + r for r in rows)
    assert list(multiple_values(merged, "w")) == [r[1:] for r in rows]
    # Written in one piece (Spark's offline repartition): back to back, no ','. A row that
    # starts with ',' after its version byte, or a size whose low byte is ',', reads the same.
    comma = [b"\x00" + b",x", b"\x00" * 44]
    for values in (rows, comma, rows + comma):
        whole = b"".join(struct.pack("<i", len(r)) + r for r in values)
        assert list(multiple_values(whole, "w")) == [r[1:] for r in values]
        assert list(multiple_values(b",".join(struct.pack("<i", len(r)) + r for r in values), "w")) == \
            [r[1:] for r in values]
    with pytest.raises(CorruptionError, match="truncated list-state value"):
        list(multiple_values(merged + b"\x00", "w"))
    key = prefix_scan_key(b"PREFIX", b"REST", 7)
    assert key.startswith(prefix_scan_key(b"PREFIX", None, 7))
    assert split_prefix_key(key, True, "w") == (b"PREFIX", b"REST")


def test_schema_files_of_versions_1_to_3() -> None:
    key = '{"type":"struct","fields":[{"name":"k","type":"long","nullable":true,"metadata":{}}]}'
    value = '{"type":"struct","fields":[{"name":"v","type":"string","nullable":true,"metadata":{}}]}'
    v1 = utf("v1") + utf(key) + utf(value)
    v2 = utf("v2") + struct.pack(">i", 2) + utf(key[:10]) + utf(key[10:]) + struct.pack(">i", 1) + utf(value)
    for data in (v1, v2):
        s = read_schema_v2(data, "schema")
        assert (s.key.simple(), s.value.simple()) == ("struct<k:long>", "struct<v:string>")
    spec = '{"keyStateEncoderType":"PrefixKeyScanStateEncoderSpec","numColsPrefixKey":1}'
    v3 = utf("v3") + struct.pack(">i", 1) + utf("m") + struct.pack(">h", 0) + struct.pack(">i", 1) + utf(key) + \
        struct.pack(">h", 0) + struct.pack(">i", 1) + utf(value) + struct.pack(">i", 1) + utf(spec) + \
        struct.pack(">i", 1) + utf("{    }")
    (cf,) = read_schema_v3(v3, "v3 file")
    assert (cf.name, cf.encoder, cf.prefix_columns) == ("m", "PrefixKeyScanStateEncoderSpec", 1)
    with pytest.raises(UnsupportedCheckpointError, match="v3 file"):
        read_schema_v3(v3[:-5], "v3 file")
    collated = key.replace('"metadata":{}', '"metadata":{"__COLLATIONS":{"k":"UNICODE_CI"}}').replace("long", "string")
    with pytest.raises(UnsupportedCheckpointError, match="collation"):
        read_schema_v2(utf("v1") + utf(collated) + utf(value), "schema")
