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
from typing import Any

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


# --- many keys at once --------------------------------------------------------------------

BatchPartitioner = Callable[[list[bytes], int], list[int]]
_VECTOR_KINDS = (_BYTES, _INT, _SHORT, _BYTE, _BOOL, _LONG, _FLOAT, _DOUBLE, _SKIP)


def rows_partitioner(schema: StructType, partitions: int) -> BatchPartitioner | None:
    """The partitions of many key rows of `schema` at once, `row_partitioner`'s answers
    computed with numpy over rows of one length at a time; None without numpy or for a
    schema with nested or wide-decimal fields (use `row_partitioner`). A row whose bytes
    are not a row of the schema raises RowFormatError."""
    try:
        import numpy as np
    except ImportError:
        return None
    fields = schema.fields
    kinds = [_kind(f.type) for f in fields]
    if not fields or any(k not in _VECTOR_KINDS for k in kinds):
        return None
    n = len(fields)
    fixed = bitset_width(n)
    min_size = fixed + 8 * n
    plan = [((i >> 6) * 8 + ((i & 63) >> 3), 1 << (i & 7), fixed + 8 * i, kind) for i, kind in enumerate(kinds)
            if kind != _SKIP]
    one_by_one = row_partitioner(schema, partitions)
    u32 = np.uint32

    def mix(h: Any, k: Any) -> Any:  # one 4-byte block into the running hashes
        k = k * u32(0xCC9E2D51)
        k = ((k << u32(15)) | (k >> u32(17))) * u32(0x1B873593)
        h = h ^ k
        h = (h << u32(13)) | (h >> u32(19))
        return h * u32(5) + u32(0xE6546B64)

    def fmix(h: Any, length: int) -> Any:
        h = h ^ u32(length)
        h = (h ^ (h >> u32(16))) * u32(0x85EBCA6B)
        h = (h ^ (h >> u32(13))) * u32(0xC2B2AE35)
        return h ^ (h >> u32(16))

    def column(rows: Any, pos: int, width: int, dtype: str) -> Any:
        return np.ascontiguousarray(rows[:, pos:pos + width]).view(dtype).ravel()

    def hash_bytes_rows(data: Any, h: Any) -> Any:  # Spark's hashUnsafeBytes of equal-length byte strings
        size = data.shape[1]
        aligned = size & ~3
        if aligned:
            words = np.ascontiguousarray(data[:, :aligned]).view("<u4")
            for j in range(aligned // 4):
                h = mix(h, words[:, j])
        for j in range(aligned, size):
            h = mix(h, data[:, j].view(np.int8).astype(np.int32).view(u32))  # a sign-extended byte
        return fmix(h, size)

    def group(rows: Any) -> Any:
        """Rows of one length (already checked to hold the fixed part): their hashes."""
        m = rows.shape[0]
        width = rows.shape[1]
        h = np.full(m, 42, dtype=u32)
        for null_byte, null_bit, slot, kind in plan:
            present = (rows[:, null_byte] & null_bit) == 0
            if kind == _BYTES:
                word = column(rows, slot, 8, "<u8")
                start, size = (word >> np.uint64(32)).astype(np.int64), (word & np.uint64(0xFFFFFFFF)).astype(np.int64)
                if bool(np.any(present & ((start < min_size) | (start + size > width)))):
                    raise RowFormatError("a field points outside its row")
                pairs = np.unique(np.stack([start, size], axis=1)[present], axis=0)
                new = h.copy()
                for s, z in pairs:
                    sel = present & (start == s) & (size == z)
                    new[sel] = hash_bytes_rows(rows[sel, s:s + z], h[sel])
                h = new
                continue
            if kind in (_LONG, _DOUBLE):
                v = column(rows, slot, 8, "<u8")
                if kind == _DOUBLE:
                    d = v.view("<f8")
                    v = np.where(d == 0.0, np.uint64(0), np.where(np.isnan(d), np.uint64(0x7FF8000000000000), v))
                lo = (v & np.uint64(0xFFFFFFFF)).astype(u32)
                hi = (v >> np.uint64(32)).astype(u32)
                new = fmix(mix(mix(h, lo), hi), 8)
            else:
                if kind == _INT:
                    k = column(rows, slot, 4, "<u4")
                elif kind == _SHORT:
                    k = column(rows, slot, 2, "<i2").astype(np.int32).view(u32)
                elif kind == _BYTE:
                    k = rows[:, slot].view(np.int8).astype(np.int32).view(u32)
                elif kind == _BOOL:
                    k = (rows[:, slot] != 0).astype(u32)
                else:  # float
                    k = column(rows, slot, 4, "<u4")
                    f = k.view("<f4")
                    k = np.where(f == 0.0, u32(0), np.where(np.isnan(f), u32(0x7FC00000), k))
                new = fmix(mix(h, k), 4)
            h = np.where(present, new, h)
        return h.view(np.int32).astype(np.int64) % partitions

    def partition_rows(keys: list[bytes], base: int) -> list[int]:
        out = [0] * len(keys)
        by_length: dict[int, list[int]] = {}
        for i, k in enumerate(keys):
            by_length.setdefault(len(k), []).append(i)
        for length, idx in by_length.items():
            if length - base < min_size or len(idx) < 8:  # too short to be a row, or not worth numpy
                for i in idx:
                    out[i] = one_by_one(keys[i], base)
                continue
            rows = np.frombuffer(b"".join(keys[i] for i in idx), dtype=np.uint8).reshape(len(idx), length)[:, base:]
            try:
                parts = group(rows).tolist()
            except RowFormatError:
                parts = [one_by_one(keys[i], base) for i in idx]  # names the row that is no row
            for i, p in zip(idx, parts, strict=True):
                out[i] = p
        return out

    return partition_rows
