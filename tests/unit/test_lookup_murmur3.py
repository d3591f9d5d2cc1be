"""Spark's Murmur3 x86_32 and its hash() of typed values, against Spark's own results
(tests/unit/lookup_vectors.json, made by tests/integration/test_lookup_vectors.py)."""

from __future__ import annotations

import pytest

from airflow_provider_streamstate.engine.lookup.encodings.murmur3 import (
    SEED,
    hash_bytes,
    hash_int,
    hash_long,
    hash_value,
    partition_of,
)
from tests.lookup_cases import TYPED_SCHEMA, load_vectors, typed_rows


def test_reference_values_of_the_primitives() -> None:
    # Published Murmur3_x86_32 values (seed 0) and Spark's `SELECT hash(...)` documentation.
    assert hash_bytes(b"", 0) == 0
    assert hash_bytes(b"test", 0) == -1167338989  # 0xba6bd213, aligned input: the reference algorithm
    assert hash_int(0, 42) == 933211791
    assert hash_long(0, 42) == -1670924195
    # `SELECT hash('Spark', array(123), 2)` is -1321691492 in Spark's docs.
    from airflow_provider_streamstate.engine.lookup.encodings.types import ArrayType, atomic

    h = hash_value("Spark", atomic("string"), SEED)
    h = hash_value([123], ArrayType("array", atomic("integer")), h)
    assert hash_value(2, atomic("integer"), h) == -1321691492


def test_unaligned_tails_are_mixed_byte_by_byte_as_spark_does() -> None:
    # Spark's hashUnsafeBytes mixes each trailing byte as a sign-extended block (not the
    # reference tail): "aé" is 3 bytes, one of them >= 0x80.
    ref = load_vectors()
    assert ref["rows"], "no vectors"
    assert hash_bytes("aé".encode(), 42) != hash_bytes("aé".encode() + b"\0", 42)


@pytest.mark.parametrize("index", range(len(typed_rows())))
def test_hash_of_every_type_matches_spark(index: int) -> None:
    vec = load_vectors()["rows"][index]
    row = typed_rows()[index]
    for col, (f, v) in enumerate(zip(TYPED_SCHEMA.fields, row, strict=True)):
        assert hash_value(v, f.type, SEED) == vec["hash_columns"][col], (f.name, v)
    h = SEED
    for f, v in zip(TYPED_SCHEMA.fields, row, strict=True):
        h = hash_value(v, f.type, h)
    assert h == vec["hash_all"]
    types = [f.type for f in TYPED_SCHEMA.fields]
    for n, p in vec["pmod"].items():
        assert partition_of(row, types, int(n)) == p
