"""The key and value schemas of a state store, from the checkpoint's own schema files.

Both layouts are written with Java's `DataOutputStream` (`writeUTF`: a 2-byte big-endian
length then modified UTF-8; `writeInt`: 4 bytes, `writeShort`: 2 bytes, big-endian); a
schema's JSON is written in chunks (`writeInt(chunks)` then one `writeUTF` per chunk):

- state schema v1/v2, one per store, in partition 0's store directory
  (`state/<op>/0[/<store>]/_metadata/schema`): `writeUTF("v2")`, the key schema's chunks,
  the value schema's chunks (v1: `writeUTF(key json)`, `writeUTF(value json)`);
- state schema v3 (transformWithState, join state format 3), under
  `state/<op>/_stateSchema/<store>/<batch>_<uuid>`, named by operator metadata v2: one
  schema per column family (see `read_schema_v3`).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_streamstate.engine.core.errors import UnsupportedCheckpointError
from airflow_provider_streamstate.engine.lookup.encodings.types import StructType, parse_struct


@dataclass(frozen=True)
class ColumnFamilySchema:
    """One column family of a store (`default` for a single-schema store)."""

    name: str
    key: StructType
    value: StructType
    encoder: str = "NoPrefixKeyStateEncoderSpec"  # or PrefixKeyScan..., RangeKeyScan...
    prefix_columns: int = 0  # PrefixKeyScan: how many leading key columns form the prefix
    ordering: tuple[int, ...] = ()  # RangeKeyScan: the ordering ordinals
    spec: dict[str, Any] = field(default_factory=dict, compare=False)


class _Reader:
    def __init__(self, data: bytes, where: str) -> None:
        self.data, self.pos, self.where = data, 0, where

    def _take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise UnsupportedCheckpointError(f"{self.where} is truncated",
                                             hint="the schema file is damaged; read this state with Spark")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def utf(self) -> str:
        (n,) = struct.unpack(">H", self._take(2))
        return _modified_utf8(self._take(n))

    def short(self) -> int:
        return int(struct.unpack(">h", self._take(2))[0])

    def int(self) -> int:
        return int(struct.unpack(">i", self._take(4))[0])

    def chunks(self) -> str:
        n = self.int()
        if not 0 < n < 10_000:
            raise ValueError(f"{n} chunks")
        return "".join(self.utf() for _ in range(n))


def _modified_utf8(raw: bytes) -> str:
    """Java's modified UTF-8: NUL as C0 80, supplementary characters as surrogate pairs."""
    text = raw.replace(b"\xc0\x80", b"\x00").decode("utf-8", errors="surrogatepass")
    return text.encode("utf-16", "surrogatepass").decode("utf-16")


def read_schema_v2(data: bytes, where: str) -> ColumnFamilySchema:
    """A state schema file of version 1 or 2 (one key and one value schema)."""
    r = _Reader(data, where)
    version = r.utf()
    try:
        if version == "v1":
            key, value = r.utf(), r.utf()
        elif version == "v2":
            key, value = r.chunks(), r.chunks()
        elif version == "v3":
            families = read_schema_v3(data, where)
            if len(families) != 1:
                raise UnsupportedCheckpointError(f"{where} describes {len(families)} column families, expected one")
            return families[0]
        else:
            raise UnsupportedCheckpointError(f"{where} has state schema version {version[:10]!r}",
                                             hint="key lookups read state schema versions 1 to 3")
    except ValueError as exc:
        raise UnsupportedCheckpointError(f"{where} is not a readable state schema file: {exc}") from None
    return ColumnFamilySchema("default", parse_struct(key, f"{where} (key)"), parse_struct(value, f"{where} (value)"))


def read_schema_v3(data: bytes, where: str) -> list[ColumnFamilySchema]:
    """A state schema v3 file: `writeUTF("v3")`, the number of column families (int), then
    per family its name (`writeUTF`), the key schema id (short; Spark 4.1, absent in 4.0)
    and the key schema's chunks, the value schema id and chunks, the key encoder spec's
    chunks (JSON: `keyStateEncoderType`, `numColsPrefixKey`, `orderingOrdinals`) and the
    user key schema's chunks (`{    }` when none)."""
    error: Exception | None = None
    for with_ids in (True, False):
        try:
            return _read_v3(data, where, with_ids)
        except (UnsupportedCheckpointError, ValueError, KeyError, TypeError) as exc:
            error = error or exc
    if isinstance(error, UnsupportedCheckpointError):
        raise error
    raise UnsupportedCheckpointError(f"{where} is not a readable state schema v3 file: {error}",
                                     hint="the schema file is damaged or from an unsupported Spark version")


def _read_v3(data: bytes, where: str, with_ids: bool) -> list[ColumnFamilySchema]:
    r = _Reader(data, where)
    version = r.utf()
    if version != "v3":
        raise UnsupportedCheckpointError(f"{where} has state schema version {version[:10]!r}, expected v3")
    out = []
    for _ in range(r.int()):
        name = r.utf()
        if with_ids:
            r.short()
        key = r.chunks()
        if with_ids:
            r.short()
        value = r.chunks()
        spec = json.loads(r.chunks())
        r.chunks()  # the user key schema: map state's user key is already in the key schema
        ctx = f"{where}, column family {name}"
        ordering = tuple(int(i) for i in spec.get("orderingOrdinals") or [])
        out.append(ColumnFamilySchema(
            name, parse_struct(key, f"{ctx} (key)"), parse_struct(value, f"{ctx} (value)"),
            str(spec.get("keyStateEncoderType") or "NoPrefixKeyStateEncoderSpec"),
            int(spec.get("numColsPrefixKey") or 0), ordering, spec))
    if r.pos != len(data):
        raise ValueError(f"{len(data) - r.pos} bytes after the last column family")
    return out
