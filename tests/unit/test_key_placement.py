"""The partition of a stored key computed from its bytes (`encodings.placement`, what a
rescale's verification runs on every key) is the one Spark computes: on the rows Spark itself
wrote (tests/unit/lookup_vectors.json: every type, nested ones decoded), and on rows of
every flat key schema, read straight from their slots, against `partition_of` (itself checked
against Spark), behind a RocksDB version byte too."""

from __future__ import annotations

import pytest

from airflow_provider_streamstate.engine.lookup.encodings.murmur3 import partition_of
from airflow_provider_streamstate.engine.lookup.encodings.placement import row_partitioner, rows_partitioner
from airflow_provider_streamstate.engine.lookup.encodings.types import StructType, atomic, struct
from airflow_provider_streamstate.engine.lookup.encodings.unsafe_row import RowFormatError, encode_row
from tests.lookup_cases import TYPED_SCHEMA, load_vectors, typed_rows

FLAT = [i for i, f in enumerate(TYPED_SCHEMA.fields) if f.type.name not in ("struct", "array", "map")
        and not (f.type.name == "decimal" and getattr(f.type, "precision", 0) > 18)]


def test_rows_spark_wrote_land_where_spark_put_them() -> None:
    vectors = load_vectors()["rows"]
    assert vectors
    for vec in vectors:
        row = bytes.fromhex(vec["unsafe_row"])
        for n, p in vec["pmod"].items():
            assert row_partitioner(TYPED_SCHEMA, int(n))(row, 0) == p
            assert row_partitioner(TYPED_SCHEMA, int(n))(b"\x00" + row, 1) == p


@pytest.mark.parametrize("column", FLAT)
def test_each_flat_column_alone_is_placed_from_its_slot_as_its_value_hashes(column: int) -> None:
    f = TYPED_SCHEMA.fields[column]
    schema = StructType("struct", (f,))
    for values in typed_rows():
        row = encode_row([values[column]], schema)
        for n in (1, 2, 7, 200):
            assert row_partitioner(schema, n)(row, 0) == partition_of([values[column]], [f.type], n), (f.name, values)


def test_every_flat_column_together_and_the_commonest_keys() -> None:
    schema = StructType("struct", tuple(TYPED_SCHEMA.fields[i] for i in FLAT))
    types = [f.type for f in schema.fields]
    for values in typed_rows():
        picked = [values[i] for i in FLAT]
        row = b"\x00" + encode_row(picked, schema)
        assert row_partitioner(schema, 13)(row, 1) == partition_of(picked, types, 13)
    one = struct(("account", atomic("string")))
    two = struct(("txn", atomic("string")), ("ts", atomic("timestamp")))
    for i in range(300):
        account = f"acct-{i:0{i % 11}d}é"
        assert row_partitioner(one, 8)(b"\x00" + encode_row([account], one), 1) == \
            partition_of([account], [one.fields[0].type], 8)
        assert row_partitioner(one, 8)(encode_row([None], one), 0) == partition_of([None], [one.fields[0].type], 8)
        values = [account, 1_700_000_000_000_000 + i]
        assert row_partitioner(two, 5)(encode_row(values, two), 0) == partition_of(values, [f.type for f in two.fields], 5)


def test_a_global_key_is_in_partition_0_and_bytes_that_are_no_row_are_refused() -> None:
    assert row_partitioner(struct(), 8)(b"\x00", 1) == 0
    one = struct(("account", atomic("string")))
    with pytest.raises(RowFormatError):
        row_partitioner(one, 8)(b"\x00" * 7, 0)
    bad = bytearray(encode_row(["acct"], one))
    bad[8:16] = ((1000 << 32) | 4).to_bytes(8, "little")  # its string points past the row
    with pytest.raises(RowFormatError):
        row_partitioner(one, 8)(bytes(bad), 0)
    two = struct(("a", atomic("string")), ("b", atomic("long")))
    with pytest.raises(RowFormatError):
        row_partitioner(two, 8)(b"\x00" * 16, 0)


def test_many_rows_at_once_get_the_partitions_one_row_at_a_time_gets() -> None:
    pytest.importorskip("numpy")
    schema = StructType("struct", tuple(TYPED_SCHEMA.fields[i] for i in FLAT))
    rows = [b"\x00" + encode_row([values[i] for i in FLAT], schema) for values in typed_rows(200)]
    for n in (1, 3, 200):
        many = rows_partitioner(schema, n)
        assert many is not None
        assert many(rows, 1) == [row_partitioner(schema, n)(r, 1) for r in rows]
    one = struct(("account", atomic("string")))
    two = struct(("txn", atomic("string")), ("ts", atomic("timestamp")))
    accounts = [f"acct-{i:0{i % 13}d}" for i in range(2000)] + [None] * 9
    for s, values in ((one, [[a] for a in accounts]), (two, [[a, i * 977 if i % 5 else None] for i, a in
                                                           enumerate(accounts)])):
        keys = [encode_row(v, s) for v in values]
        assert rows_partitioner(s, 16)(keys, 0) == [row_partitioner(s, 16)(k, 0) for k in keys]  # type: ignore[misc]
    nested = rows_partitioner(TYPED_SCHEMA, 4)
    assert nested is None  # structs, arrays, maps: one row at a time
    bad = [encode_row([f"acct-{i:04d}"], one) for i in range(20)]
    bad[7] = bad[7][:8] + ((1000 << 32) | 4).to_bytes(8, "little") + bad[7][16:]
    with pytest.raises(RowFormatError):
        rows_partitioner(one, 8)(bad, 0)  # type: ignore[misc]
