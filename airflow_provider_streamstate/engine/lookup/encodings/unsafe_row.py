"""Spark's UnsafeRow binary format: decode state keys and values, and encode a key.

Every state store keeps keys and values as UnsafeRow bytes (RocksDB adds a prefix, see
`rocksdb_keys`). Spark compares keys by their bytes (the HDFS-backed store's map and
RocksDB alike), and equal rows written by Spark's row writer are equal bytes, so
encoding a user's key exactly as Spark would lets a lookup compare bytes instead of
decoding every key of a partition.

Layout of a row of n fields (all integers little-endian):

    [null bits: ceil(n/64) 8-byte words][n 8-byte slots][variable-length region]

A slot holds a fixed-width value (boolean/byte: 1 byte, short: 2, int/date/float: 4,
long/timestamp/double/decimal of precision <= 18: 8; the rest of the slot zero), or for
string, binary, struct, array, map and a larger decimal `offset << 32 | size`, the
offset counted from the row's start and the data padded with zeros to 8 bytes. A larger
decimal always reserves 16 bytes (its BigInteger two's-complement bytes, big-endian), and
a null one keeps its offset with size 0. A null field has its bit set and a zero slot.

An array (UnsafeArrayData): [element count: 8][null bits: ceil(n/64) words][n elements
of the type's width (1, 2, 4 or 8; 8 = offset/size for variable-length ones, offsets
from the array's start), padded to 8][variable-length data]. A map (UnsafeMapData):
[key array size: 8][key array][value array].
"""

from __future__ import annotations

import datetime as dt
import struct as _struct
from collections.abc import Sequence
from typing import Any

from airflow_provider_streamstate.engine.lookup.encodings.murmur3 import (
    EPOCH,
    EPOCH_DATE,
    big_integer_bytes,
    days,
    daytime_micros,
    map_items,
    micros,
    struct_values,
    to_decimal,
    unscaled,
)
from airflow_provider_streamstate.engine.lookup.encodings.types import (
    MAX_LONG_DIGITS,
    ArrayType,
    DataType,
    DecimalType,
    MapType,
    StructType,
)

_Q = _struct.Struct("<q")
_I = _struct.Struct("<i")
_H = _struct.Struct("<h")
_F = _struct.Struct("<f")
_D = _struct.Struct("<d")
_QU = _struct.Struct("<Q")


class RowFormatError(ValueError):
    """Bytes that are not a row of the schema (a truncated or corrupted record)."""


def bitset_width(n: int) -> int:
    return ((n + 63) // 64) * 8


def _round8(n: int) -> int:
    return (n + 7) & ~7


# --- decoding -------------------------------------------------------------------------


def decode_row(data: bytes | memoryview, schema: StructType, offset: int = 0, size: int | None = None) -> dict[str, Any]:
    """A row of `schema` as {field name: value}; struct fields with the same name (Spark
    allows them) keep the first value under the name and the others as `name#2`, ..."""
    return dict(zip(field_names(schema), decode_row_values(data, schema, offset, size), strict=True))


def field_names(schema: StructType) -> list[str]:
    """The names `decode_row` gives a row's fields: a name that repeats (two aggregates with
    one buffer name) is `name`, then `name#2`, ... in schema order."""
    out: list[str] = []
    for f in schema.fields:
        name, i = f.name, 1
        while name in out:
            i += 1
            name = f"{f.name}#{i}"
        out.append(name)
    return out


def decode_row_values(data: bytes | memoryview, schema: StructType, offset: int = 0,
                      size: int | None = None) -> list[Any]:
    """A row's values in schema order."""
    n = len(schema.fields)
    end = len(data) if size is None else offset + size
    fixed = offset + bitset_width(n)
    if fixed + 8 * n > end:
        raise RowFormatError(f"{end - offset} bytes cannot hold a row of {n} fields")
    out: list[Any] = []
    for i, f in enumerate(schema.fields):
        word = data[offset + (i >> 6) * 8: offset + (i >> 6) * 8 + 8]
        if _QU.unpack(word)[0] >> (i & 63) & 1:
            out.append(None)
            continue
        out.append(_read_slot(data, fixed + 8 * i, offset, end, f.type))
    return out


def _read_slot(data: bytes | memoryview, pos: int, base: int, end: int, t: DataType) -> Any:
    name = t.name
    if name in ("null", "void"):
        return None
    if name == "boolean":
        return data[pos] != 0
    if name == "byte":
        b = data[pos]
        return b - 256 if b > 127 else b
    if name == "short":
        return _H.unpack_from(data, pos)[0]
    if name in ("integer", "yearmonth"):
        return _I.unpack_from(data, pos)[0]
    if name == "date":
        return EPOCH_DATE + dt.timedelta(days=_I.unpack_from(data, pos)[0])
    if name == "float":
        return _F.unpack_from(data, pos)[0]
    if name == "double":
        return _D.unpack_from(data, pos)[0]
    if name == "long":
        return _Q.unpack_from(data, pos)[0]
    if name == "timestamp":
        return EPOCH + dt.timedelta(microseconds=_Q.unpack_from(data, pos)[0])
    if name == "timestamp_ntz":
        return (EPOCH + dt.timedelta(microseconds=_Q.unpack_from(data, pos)[0])).replace(tzinfo=None)
    if name == "daytime":
        return dt.timedelta(microseconds=_Q.unpack_from(data, pos)[0])
    if isinstance(t, DecimalType) and t.precision <= MAX_LONG_DIGITS:
        return to_decimal(_Q.unpack_from(data, pos)[0], t.scale)
    word = _QU.unpack_from(data, pos)[0]
    start, size = base + (word >> 32), word & 0xFFFFFFFF
    if start < base or start + size > end:
        raise RowFormatError(f"a field points outside its row ({word >> 32}+{size} of {end - base} bytes)")
    return _read_var(data, start, size, t)


def _read_var(data: bytes | memoryview, start: int, size: int, t: DataType) -> Any:
    name = t.name
    if name == "string":
        try:
            return bytes(data[start:start + size]).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RowFormatError(f"a string field is not UTF-8: {exc}") from None
    if name == "binary":
        return bytes(data[start:start + size])
    if isinstance(t, DecimalType):
        return to_decimal(int.from_bytes(data[start:start + size], "big", signed=True), t.scale)
    if isinstance(t, StructType):
        return decode_row(data, t, start, size)
    if isinstance(t, ArrayType):
        return _read_array(data, start, size, t.element)
    if isinstance(t, MapType):
        key_size = _Q.unpack_from(data, start)[0]
        if key_size < 0 or 8 + key_size > size:
            raise RowFormatError("a map's key array size is out of range")
        keys = _read_array(data, start + 8, key_size, t.key)
        values = _read_array(data, start + 8 + key_size, size - 8 - key_size, t.value)
        if len(keys) != len(values):
            raise RowFormatError("a map has different numbers of keys and values")
        pairs = list(zip(keys, values, strict=True))
        try:
            return dict(pairs)
        except TypeError:  # unhashable keys (structs, arrays): keep the pairs
            return pairs
    raise RowFormatError(f"cannot decode a {t.simple()}")


def _read_array(data: bytes | memoryview, start: int, size: int, et: DataType) -> list[Any]:
    n = _Q.unpack_from(data, start)[0]
    if n < 0 or 8 + bitset_width(n) > size:
        raise RowFormatError("an array's element count is out of range")
    bits = start + 8
    elems = bits + bitset_width(n)
    width = et.element_width
    end = start + size
    out: list[Any] = []
    for i in range(n):
        if _QU.unpack_from(data, bits + (i >> 6) * 8)[0] >> (i & 63) & 1:
            out.append(None)
            continue
        pos = elems + i * width
        if et.is_fixed or (isinstance(et, DecimalType) and et.precision <= MAX_LONG_DIGITS):
            out.append(_read_element(data, pos, et))
        else:
            word = _QU.unpack_from(data, pos)[0]
            s, z = start + (word >> 32), word & 0xFFFFFFFF
            if s < start or s + z > end:
                raise RowFormatError("an array element points outside its array")
            out.append(_read_var(data, s, z, et))
    return out


def _read_element(data: bytes | memoryview, pos: int, t: DataType) -> Any:
    name = t.name
    if name == "boolean":
        return data[pos] != 0
    if name == "byte":
        b = data[pos]
        return b - 256 if b > 127 else b
    if name == "short":
        return _H.unpack_from(data, pos)[0]
    return _read_slot(data, pos, pos, pos + 8, t)


# --- encoding -------------------------------------------------------------------------


def encode_row(values: Sequence[Any] | dict[str, Any], schema: StructType) -> bytes:
    """The bytes Spark's UnsafeRowWriter writes for these values (a key to look up)."""
    vals = struct_values(values, schema)
    n = len(schema.fields)
    width = bitset_width(n)
    buf = bytearray(width + 8 * n)
    for i, (f, v) in enumerate(zip(schema.fields, vals, strict=True)):
        slot = width + 8 * i
        t = f.type
        if v is None or t.name in ("null", "void"):
            _set_null(buf, 0, i)
            if isinstance(t, DecimalType) and t.precision > MAX_LONG_DIGITS:
                # a null large decimal still reserves its 16 bytes and keeps the offset
                _QU.pack_into(buf, slot, len(buf) << 32)
                buf.extend(bytes(16))
            continue
        if t.is_fixed or (isinstance(t, DecimalType) and t.precision <= MAX_LONG_DIGITS):
            buf[slot:slot + 8] = _fixed_bytes(v, t).ljust(8, b"\0")
            continue
        if isinstance(t, DecimalType):
            raw = big_integer_bytes(unscaled(v, t))
            if len(raw) > 16:
                raise ValueError(f"{v} does not fit {t.simple()}")
            _QU.pack_into(buf, slot, (len(buf) << 32) | len(raw))
            buf.extend(raw.ljust(16, b"\0"))
            continue
        data = _var_bytes(v, t)
        _QU.pack_into(buf, slot, (len(buf) << 32) | len(data))
        buf.extend(data.ljust(_round8(len(data)), b"\0"))
    return bytes(buf)


def _set_null(buf: bytearray, base: int, i: int) -> None:
    pos = base + (i >> 6) * 8
    word = _QU.unpack_from(buf, pos)[0] | (1 << (i & 63))
    _QU.pack_into(buf, pos, word)


def _fixed_bytes(v: Any, t: DataType) -> bytes:
    name = t.name
    if name == "boolean":
        return b"\x01" if v else b"\x00"
    if name == "byte":
        return _struct.pack("<b", int(v))
    if name == "short":
        return _H.pack(int(v))
    if name in ("integer", "yearmonth"):
        return _I.pack(int(v))
    if name == "date":
        return _I.pack(days(v))
    if name == "float":
        return _F.pack(float(v))
    if name == "double":
        return _D.pack(float(v))
    if name == "long":
        return _Q.pack(int(v))
    if name in ("timestamp", "timestamp_ntz"):
        return _Q.pack(micros(v))
    if name == "daytime":
        return _Q.pack(daytime_micros(v))
    if isinstance(t, DecimalType):
        return _Q.pack(unscaled(v, t))
    raise ValueError(f"{t.simple()} is not a fixed-width type")


def _var_bytes(v: Any, t: DataType) -> bytes:
    name = t.name
    if name == "string":
        return v.encode("utf-8") if isinstance(v, str) else bytes(v)
    if name == "binary":
        return bytes(v)
    if isinstance(t, DecimalType):  # inside an array: just the bytes, word-padded by the caller
        return big_integer_bytes(unscaled(v, t))
    if isinstance(t, StructType):
        return encode_row(v, t)
    if isinstance(t, ArrayType):
        return _encode_array(list(v), t.element)
    if isinstance(t, MapType):
        items = map_items(v)
        keys = _encode_array([k for k, _ in items], t.key)
        values = _encode_array([x for _, x in items], t.value)
        return _Q.pack(len(keys)) + keys + values
    raise ValueError(f"cannot encode a {t.simple()}")


def _encode_array(items: list[Any], et: DataType) -> bytes:
    n = len(items)
    header = 8 + bitset_width(n)
    width = et.element_width
    buf = bytearray(header + _round8(width * n))
    _Q.pack_into(buf, 0, n)
    fixed = et.is_fixed or (isinstance(et, DecimalType) and et.precision <= MAX_LONG_DIGITS)
    for i, v in enumerate(items):
        pos = header + i * width
        if v is None or et.name in ("null", "void"):
            _set_null(buf, 8, i)
            continue
        if fixed:
            raw = _fixed_bytes(v, et)
            buf[pos:pos + width] = raw[:width]
            continue
        data = _var_bytes(v, et)
        _QU.pack_into(buf, pos, (len(buf) << 32) | len(data))
        buf.extend(data.ljust(_round8(len(data)), b"\0"))
    return bytes(buf)


def normalize_float_key(v: Any, t: DataType) -> Any:
    """Spark normalizes -0.0 to 0.0 and every NaN to the canonical NaN in grouping and join
    keys (NormalizeFloatingNumbers) before they reach the state store."""
    if t.name in ("float", "double") and isinstance(v, float):
        if v == 0.0:
            return 0.0
        if v != v:
            return float("nan")
    return v


__all__ = ["RowFormatError", "decode_row", "decode_row_values", "encode_row"]
