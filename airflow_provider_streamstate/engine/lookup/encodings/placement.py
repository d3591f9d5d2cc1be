"""The partition Spark puts a stored key in, computed from the key's bytes: a function bound
once per key schema, for checks that run on every key of a state (a rescale's
verification).

`murmur3.partition_of` hashes decoded values by their type; here each field's hash input is
taken from the UnsafeRow slot directly: a string or binary's bytes (Spark hashes a
UTF8String's bytes), an int-like value's 4 bytes sign-extended, a long-like value's 8 bytes
(a decimal of precision <= 18 is its unscaled long there), a float or double through its
canonical bits. A null field leaves the hash as it is. Fields of other types (structs,
arrays, maps, wide decimals) are decoded and hashed by `murmur3.hash_value`, so every
schema gets the same answer `partition_of` gives.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from airflow_provider_streamstate.engine.lookup.encodings.murmur3 import (
    SEED,
    double_bits,
    float_bits,
    hash_bytes,
    hash_int,
    hash_long,
    hash_value,
)
from airflow_provider_streamstate.engine.lookup.encodings.types import (
    MAX_LONG_DIGITS,
    DecimalType,
    StructType,
)
from airflow_provider_streamstate.engine.lookup.encodings.unsafe_row import (
    RowFormatError,
    bitset_width,
    decode_row_values,
)

# A key's partition from (the buffer holding the key row, where the row starts in it).
Partitioner = Callable[[bytes, int], int]

_Q = struct.Struct("<q")
_QU = struct.Struct("<Q")
_I = struct.Struct("<i")
_H = struct.Struct("<h")
_F = struct.Struct("<f")
_D = struct.Struct("<d")
_BYTES, _INT, _SHORT, _BYTE, _BOOL, _LONG, _FLOAT, _DOUBLE, _SKIP, _DECODED = range(10)
_M32 = 0xFFFFFFFF


def _kind(t: object) -> int:
    name = getattr(t, "name", "")
    if isinstance(t, DecimalType):
        return _LONG if t.precision <= MAX_LONG_DIGITS else _DECODED
    if name in ("string", "binary"):
        return _BYTES
    if name in ("integer", "date", "yearmonth"):
        return _INT
    if name == "short":
        return _SHORT
    if name == "byte":
        return _BYTE
    if name == "boolean":
        return _BOOL
    if name in ("long", "timestamp", "timestamp_ntz", "daytime"):
        return _LONG
    if name == "float":
        return _FLOAT
    if name == "double":
        return _DOUBLE
    if name in ("null", "void"):
        return _SKIP
    return _DECODED


def row_partitioner(schema: StructType, partitions: int) -> Partitioner:
    """`pmod(murmur3(key columns, 42), partitions)` of a key row of `schema`; a schema
    without columns (a global aggregation) keeps its one key in partition 0.
    RowFormatError when the bytes are not a row of the schema."""
    fields = schema.fields
    if not fields:
        return lambda data, base: 0
    kinds = [_kind(f.type) for f in fields]
    if _DECODED in kinds:
        types = [f.type for f in fields]

        def decoded(data: bytes, base: int) -> int:
            h = SEED
            for v, t in zip(decode_row_values(data, schema, base), types, strict=True):
                h = hash_value(v, t, h)
            return h % partitions

        return decoded
    n = len(fields)
    fixed = bitset_width(n)
    plan = tuple((i, (i >> 6) * 8 + ((i & 63) >> 3), 1 << (i & 7), fixed + 8 * i, kind)
                 for i, kind in enumerate(kinds))
    min_size = fixed + 8 * n

    if n == 1 and kinds[0] == _BYTES:  # the commonest key: one string column
        slot = fixed

        def one_string(data: bytes, base: int) -> int:
            end = len(data)
            if end - base < min_size:
                raise RowFormatError(f"{end - base} bytes cannot hold a row of 1 field")
            if data[base] & 1:
                return SEED % partitions
            word = _QU.unpack_from(data, base + slot)[0]
            start = base + (word >> 32)
            stop = start + (word & _M32)
            if start < base + min_size or stop > end:
                raise RowFormatError(f"a field points outside its row ({word >> 32}+{word & _M32} of "
                                     f"{end - base} bytes)")
            return hash_bytes(data[start:stop], SEED) % partitions

        return one_string

    def flat(data: bytes, base: int) -> int:
        end = len(data)
        if end - base < min_size:
            raise RowFormatError(f"{end - base} bytes cannot hold a row of {n} fields")
        h = SEED
        for _i, null_byte, null_bit, slot, kind in plan:
            if data[base + null_byte] & null_bit or kind == _SKIP:
                continue
            pos = base + slot
            if kind == _BYTES:
                word = _QU.unpack_from(data, pos)[0]
                start = base + (word >> 32)
                stop = start + (word & _M32)
                if start < base + min_size or stop > end:
                    raise RowFormatError(f"a field points outside its row ({word >> 32}+{word & _M32} of "
                                         f"{end - base} bytes)")
                h = hash_bytes(data[start:stop], h)
            elif kind == _LONG:
                h = hash_long(_Q.unpack_from(data, pos)[0], h)
            elif kind == _INT:
                h = hash_int(_I.unpack_from(data, pos)[0], h)
            elif kind == _SHORT:
                h = hash_int(_H.unpack_from(data, pos)[0], h)
            elif kind == _BYTE:
                b = data[pos]
                h = hash_int(b - 256 if b > 127 else b, h)
            elif kind == _BOOL:
                h = hash_int(1 if data[pos] else 0, h)
            elif kind == _FLOAT:
                h = hash_int(float_bits(_F.unpack_from(data, pos)[0]), h)
            else:
                h = hash_long(double_bits(_D.unpack_from(data, pos)[0]), h)
        return h % partitions

    return flat
