"""Spark's Murmur3 x86_32 and its `hash()` of typed values: which partition a key is in.

A stateful operator's input is hash-partitioned on its key columns
(`HashPartitioning.partitionIdExpression` = `pmod(Murmur3Hash(keys, seed 42), n)`), and
partition p of the shuffle is state store partition p. So the state of one key lives in
one partition directory, and we find it by computing the same hash Spark computes.

Spark's byte hash is *not* the reference Murmur3 for lengths that are not a multiple of 4
(`Murmur3_x86_32.hashUnsafeBytes`, kept for compatibility since Spark 2.0): each trailing
byte is mixed as a whole sign-extended block. `hash_bytes` reproduces that.

Values are hashed by their Spark type (catalyst `InterpretedHashFunction.hash`): a null
leaves the running hash unchanged; boolean/byte/short/int/date as an int; long/timestamp
as a long; float/double with -0.0 as 0 and their IEEE bits (NaN canonical); a decimal of
precision <= 18 as its unscaled long, a larger one as the bytes of its unscaled
BigInteger; string (UTF-8) and binary as bytes; arrays, maps (key then value) and structs
element by element, each chained into the running hash.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import struct as _struct
from collections.abc import Sequence
from typing import Any

from airflow_provider_streamstate.engine.lookup.encodings.types import (
    MAX_LONG_DIGITS,
    ArrayType,
    DataType,
    DecimalType,
    MapType,
    StructType,
)

SEED = 42  # Murmur3Hash's default seed, the one HashPartitioning uses
_C1 = 0xCC9E2D51
_C2 = 0x1B873593
_M32 = 0xFFFFFFFF
_WORDS = _struct.Struct("<I")
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
EPOCH_DATE = dt.date(1970, 1, 1)
# Spark's decimals have up to 38 digits: Python's default context (28) would round them.
DECIMAL_CONTEXT = decimal.Context(prec=80, Emax=999_999, Emin=-999_999)


def _fmix(h1: int, length: int) -> int:
    h1 ^= length
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _M32
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _M32
    h1 ^= h1 >> 16
    return h1


def _signed(x: int) -> int:
    x &= _M32
    return x - (1 << 32) if x & 0x80000000 else x


def hash_int(value: int, seed: int) -> int:
    """`Murmur3_x86_32.hashInt`: a signed 32-bit result."""
    k1 = ((value & _M32) * _C1) & _M32
    k1 = (((k1 << 15) | (k1 >> 17)) * _C2) & _M32
    h1 = (seed & _M32) ^ k1
    h1 = ((((h1 << 13) | (h1 >> 19)) & _M32) * 5 + 0xE6546B64) & _M32
    return _signed(_fmix(h1, 4))


def hash_long(value: int, seed: int) -> int:
    """`Murmur3_x86_32.hashLong`: low word first, then the high word."""
    value &= 0xFFFFFFFFFFFFFFFF
    k1 = ((value & _M32) * _C1) & _M32
    k1 = (((k1 << 15) | (k1 >> 17)) * _C2) & _M32
    h1 = (seed & _M32) ^ k1
    h1 = ((((h1 << 13) | (h1 >> 19)) & _M32) * 5 + 0xE6546B64) & _M32
    k1 = ((value >> 32) * _C1) & _M32
    k1 = (((k1 << 15) | (k1 >> 17)) * _C2) & _M32
    h1 ^= k1
    h1 = ((((h1 << 13) | (h1 >> 19)) & _M32) * 5 + 0xE6546B64) & _M32
    return _signed(_fmix(h1, 8))


def _tail_block(b: int) -> int:
    k1 = ((b - 256 if b > 127 else b) * _C1) & _M32  # a sign-extended byte
    return (((k1 << 15) | (k1 >> 17)) * _C2) & _M32


_TAIL = tuple(_tail_block(b) for b in range(256))  # each trailing byte's mixed block


def hash_bytes(data: bytes, seed: int) -> int:
    """`Murmur3_x86_32.hashUnsafeBytes` (Spark's legacy tail handling). The rounds are
    written out: this runs once per key of a state's placement check."""
    n = len(data)
    aligned = n & ~3
    h1 = seed & _M32
    for (k1,) in _WORDS.iter_unpack(data[:aligned] if aligned != n else data):
        k1 = (k1 * _C1) & _M32
        h1 ^= (((k1 << 15) | (k1 >> 17)) * _C2) & _M32
        h1 = ((((h1 << 13) | (h1 >> 19)) & _M32) * 5 + 0xE6546B64) & _M32
    for b in data[aligned:]:
        h1 ^= _TAIL[b]
        h1 = ((((h1 << 13) | (h1 >> 19)) & _M32) * 5 + 0xE6546B64) & _M32
    h1 ^= n
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _M32
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _M32
    h1 ^= h1 >> 16
    return h1 - 0x100000000 if h1 & 0x80000000 else h1


def unscaled(value: Any, t: DecimalType) -> int:
    """The unscaled integer of a decimal at the type's scale (Spark rounds HALF_UP)."""
    d = value if isinstance(value, decimal.Decimal) else decimal.Decimal(str(value))
    q = d.scaleb(t.scale, DECIMAL_CONTEXT).quantize(decimal.Decimal(1), rounding=decimal.ROUND_HALF_UP,
                                                   context=DECIMAL_CONTEXT)
    return int(q)


def to_decimal(unscaled_value: int, scale: int) -> decimal.Decimal:
    """The decimal of an unscaled integer, exactly (no rounding to 28 digits)."""
    return decimal.Decimal(unscaled_value).scaleb(-scale, DECIMAL_CONTEXT)


def big_integer_bytes(n: int) -> bytes:
    """Java's `BigInteger.toByteArray()`: minimal big-endian two's complement."""
    length = (n + (n < 0)).bit_length() // 8 + 1
    return n.to_bytes(length, "big", signed=True)


def micros(value: Any) -> int:
    """A timestamp as microseconds since the epoch (naive datetimes are taken as UTC)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        delta = value - EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    raise TypeError(f"{value!r} is not a timestamp")


def days(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, dt.datetime):
        value = value.date()
    if isinstance(value, dt.date):
        return (value - EPOCH_DATE).days
    raise TypeError(f"{value!r} is not a date")


def daytime_micros(value: Any) -> int:
    if isinstance(value, dt.timedelta):
        return (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    return int(value)


def float_bits(value: float) -> int:
    """`floatToIntBits` after -0.0 -> 0.0 (NaN collapses to the canonical NaN)."""
    if value == 0.0:
        return 0
    if math.isnan(value):
        return 0x7FC00000
    return _struct.unpack("<I", _struct.pack("<f", value))[0]


def double_bits(value: float) -> int:
    if value == 0.0:
        return 0
    if math.isnan(value):
        return 0x7FF8000000000000
    return _struct.unpack("<Q", _struct.pack("<d", value))[0]


def hash_value(value: Any, t: DataType, seed: int) -> int:
    """Spark's `Murmur3HashFunction.hash(value, type, seed)`."""
    if value is None:
        return seed
    name = t.name
    if name in ("null", "void"):
        return seed
    if name == "boolean":
        return hash_int(1 if value else 0, seed)
    if name in ("byte", "short", "integer", "yearmonth"):
        return hash_int(int(value), seed)
    if name == "date":
        return hash_int(days(value), seed)
    if name == "long":
        return hash_long(int(value), seed)
    if name in ("timestamp", "timestamp_ntz"):
        return hash_long(micros(value), seed)
    if name == "daytime":
        return hash_long(daytime_micros(value), seed)
    if name == "float":
        return hash_int(float_bits(float(value)), seed)
    if name == "double":
        return hash_long(double_bits(float(value)), seed)
    if isinstance(t, DecimalType):
        n = unscaled(value, t)
        if t.precision <= MAX_LONG_DIGITS:
            return hash_long(n, seed)
        return hash_bytes(big_integer_bytes(n), seed)
    if name == "string":
        return hash_bytes(value.encode("utf-8") if isinstance(value, str) else bytes(value), seed)
    if name == "binary":
        return hash_bytes(bytes(value), seed)
    if isinstance(t, ArrayType):
        h = seed
        for item in value:
            h = hash_value(item, t.element, h)
        return h
    if isinstance(t, MapType):
        h = seed
        for k, v in map_items(value):
            h = hash_value(k, t.key, h)
            h = hash_value(v, t.value, h)
        return h
    if isinstance(t, StructType):
        h = seed
        for f, v in zip(t.fields, struct_values(value, t), strict=True):
            h = hash_value(v, f.type, h)
        return h
    raise TypeError(f"cannot hash a {t.simple()}")


def map_items(value: Any) -> list[tuple[Any, Any]]:
    """A map value as (key, value) pairs in storage order (a dict or a list of pairs)."""
    if isinstance(value, dict):
        return list(value.items())
    return [(k, v) for k, v in value]


def struct_values(value: Any, t: StructType) -> list[Any]:
    """A struct value's fields in schema order, from a dict (by name) or a sequence."""
    if isinstance(value, dict):
        return [value.get(f.name) for f in t.fields]
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        if len(value) != len(t.fields):
            raise ValueError(f"{len(value)} values for {len(t.fields)} fields of {t.simple()}")
        return list(value)
    raise TypeError(f"{value!r} is not a struct of {t.simple()}")


def partition_of(values: Sequence[Any], types: Sequence[DataType], num_partitions: int) -> int:
    """`pmod(Murmur3Hash(values, 42), num_partitions)`: the shuffle (and state) partition."""
    h = SEED
    for v, t in zip(values, types, strict=True):
        h = hash_value(v, t, h)
    return h % num_partitions  # Python's % on a positive modulus is pmod
