"""The UnsafeRow codec against the bytes Spark's UnsafeProjection writes for rows of every
type (tests/unit/lookup_vectors.json): decoding gives the values back, and encoding the
values gives Spark's bytes exactly (what a key lookup compares)."""

from __future__ import annotations

import decimal

import pytest

from airflow_provider_streamstate.engine.lookup.encodings.types import parse_struct
from airflow_provider_streamstate.engine.lookup.encodings.unsafe_row import (
    RowFormatError,
    decode_row,
    encode_row,
)
from tests.lookup_cases import TYPED_SCHEMA, load_vectors, ours_norm, typed_rows


@pytest.mark.parametrize("index", range(len(typed_rows())))
def test_rows_decode_and_encode_exactly_as_spark_writes_them(index: int) -> None:
    raw = bytes.fromhex(load_vectors()["rows"][index]["unsafe_row"])
    row = typed_rows()[index]
    decoded = decode_row(raw, TYPED_SCHEMA)
    for f, (name, got), want in zip(TYPED_SCHEMA.fields, decoded.items(), row, strict=True):
        assert name == f.name
        assert ours_norm(got, f.type) == ours_norm(want, f.type), f.name
    assert encode_row(row, TYPED_SCHEMA) == raw
    assert encode_row(decoded, TYPED_SCHEMA) == raw


def test_a_window_key_and_repeated_names() -> None:
    schema = parse_struct({"type": "struct", "fields": [
        {"name": "g", "type": "long", "nullable": True, "metadata": {}},
        {"name": "g", "type": "string", "nullable": True, "metadata": {}}]}, "test")
    raw = encode_row([5, "x"], schema)
    assert decode_row(raw, schema) == {"g": 5, "g#2": "x"}


def test_decimal_precision_decides_the_layout() -> None:
    small = parse_struct({"type": "struct", "fields": [
        {"name": "d", "type": "decimal(18,3)", "nullable": True, "metadata": {}}]}, "t")
    big = parse_struct({"type": "struct", "fields": [
        {"name": "d", "type": "decimal(19,3)", "nullable": True, "metadata": {}}]}, "t")
    assert len(encode_row([decimal.Decimal("1.5")], small)) == 16
    assert len(encode_row([decimal.Decimal("1.5")], big)) == 32  # 16 bytes reserved
    assert len(encode_row([None], big)) == 32  # even when null, offset kept
    assert decode_row(encode_row([decimal.Decimal("-12.345")], big), big) == {"d": decimal.Decimal("-12.345")}


def test_damaged_rows_are_refused() -> None:
    raw = bytes.fromhex(load_vectors()["rows"][7]["unsafe_row"])
    with pytest.raises(RowFormatError):
        decode_row(raw[:40], TYPED_SCHEMA)
