"""How Spark's RocksDB state store lays out keys and values (`RocksDBStateEncoder`,
`RocksDBStateStoreProvider`, Spark 3.5-4.1, UnsafeRow encoding).

All integers written with `Platform.put*`: native order, little-endian on x86.

- version byte: every encoded row is `0x00 | UnsafeRow bytes` (STATE_ENCODING_VERSION 0);
- column families (transformWithState, join state format 3: `useColumnFamilies`): each
  key starts with its virtual column family id (2 bytes), ids from the checkpoint zip's
  `columnFamilyMapping`;
- NoPrefixKeyStateEncoder: `[cf] 0x00 row(key)`;
- PrefixKeyScanStateEncoder (map state: key = (grouping key, user key), prefix 1 column):
  `[cf] len(4) 0x00 row(prefix columns) 0x00 row(remaining columns)`, len counting the
  encoded prefix with its version byte; a prefix scan seeks `[cf] len 0x00 row(prefix)`;
- RangeKeyScanStateEncoder (timers): the ordering columns as binary fields `marker (0x00
  negative, 0x01 positive, 0x02 null) | big-endian value`, the rest as a row;
- values: single `0x00 row`; multiple (list state) `len(4) 0x00 row` joined with ',' (merged
  operands) or back to back (a list written in one piece, as Spark's offline repartition does).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from airflow_provider_streamstate.engine.core.errors import CorruptionError

VERSION = b"\x00"
_CF = struct.Struct("<h")
_LEN = struct.Struct("<i")


def cf_prefix(cf_id: int | None) -> bytes:
    return b"" if cf_id is None else _CF.pack(cf_id)


def no_prefix_key(row: bytes, cf_id: int | None = None) -> bytes:
    return cf_prefix(cf_id) + VERSION + row


def prefix_scan_key(prefix_row: bytes, remaining_row: bytes | None, cf_id: int | None = None) -> bytes:
    """A PrefixKeyScan key; `remaining_row` None: the prefix to scan with."""
    encoded = VERSION + prefix_row
    out = cf_prefix(cf_id) + _LEN.pack(len(encoded)) + encoded
    return out if remaining_row is None else out + VERSION + remaining_row


def split_prefix_key(key: bytes, cf: bool, where: str) -> tuple[bytes, bytes]:
    """(prefix row, remaining row) of a PrefixKeyScan key, version bytes removed."""
    pos = 2 if cf else 0
    (n,) = _LEN.unpack_from(key, pos)
    pos += 4
    if n < 1 or pos + n + 1 > len(key):
        raise CorruptionError(f"{where} holds a prefix-scan key with a bad prefix length {n}")
    return key[pos + 1:pos + n], key[pos + n + 1:]


def single_value(value: bytes, where: str) -> bytes:
    if not value or value[0] != 0:
        raise CorruptionError(f"{where} holds a value without the state encoding version byte 0",
                              hint="the state may be Avro-encoded or damaged; read it with Spark")
    return value[1:]


def multiple_values(value: bytes, where: str) -> Iterator[bytes]:
    """The rows of a list-state value, version bytes removed. Merged operands are joined by
    ','; a list Spark wrote in one piece (its offline repartition does) has no separator.
    A ',' is a separator when what follows it reads as an element (size, version byte 0)."""
    pos, n = 0, len(value)
    while pos < n:
        if pos + 4 > n:
            raise CorruptionError(f"{where} holds a truncated list-state value")
        (size,) = _LEN.unpack_from(value, pos)
        pos += 4
        if size < 1 or pos + size > n:
            raise CorruptionError(f"{where} holds a list-state element of impossible size {size}")
        yield single_value(value[pos:pos + size], where)
        pos += size
        if pos < n and value[pos] == _SEPARATOR and _element_at(value, pos + 1):
            pos += 1


_SEPARATOR = ord(",")


def _element_at(value: bytes, pos: int) -> bool:
    """Whether a list element (a size that fits, then the version byte 0) starts at `pos`."""
    if pos + 5 > len(value):
        return False
    (size,) = _LEN.unpack_from(value, pos)
    return 1 <= size <= len(value) - pos - 4 and value[pos + 4] == 0
