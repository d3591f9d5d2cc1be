"""RocksDB block-based table blocks as they sit in a file: varints and block handles, the
5-byte trailer's checksum, the decompression of a block, and the prefix-compressed entries
inside one.

Every block is followed by its trailer, `compression type (1) | checksum (4, LE)`, the
checksum over the block and its type byte: CRC32C (masked), xxHash32, xxHash64 (its low 32
bits) or XXH3 (the low 32 bits of XXH3-64 of the block, xor type * 0x6b9083d9, RocksDB's
default and what Spark writes); format version 6 adds a per-file context to it (the
footer's base context checksum and the block's offset). A block read by ranges is verified
here, alone: that is what stands for a whole file's sha256 when only some of its blocks are
read.

Compression types, by the names Spark's `spark.sql.streaming.stateStore.rocksdb.compression`
takes (RocksJava `CompressionType.getCompressionType`): `none` (and any unknown name) 0,
`snappy` 1 (the block is a raw snappy stream), `z` 2 (zlib), `bzip2` 3, `lz4` 4 (Spark's
default), `lz4hc` 5, `zstd` 7; from format version 2 on every type but snappy starts with the
decompressed size (varint32). `xpress` 6 exists only in Windows builds of RocksDB.

A block: entries `shared | non-shared | value length (varint32s) | key delta | value`, then
restart offsets (4 bytes each) and their count (4; its top bit set marks a hash data-block
index, refused). Index blocks of format version >= 4 may leave out the value length and
delta-encode block handles between restart points.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from airflow_provider_streamstate.engine.core.errors import CorruptionError, UnsupportedCheckpointError

TRAILER = 5
_U32 = struct.Struct("<I")
_XXH3_PRIME = 0x6B9083D9
COMPRESSION_CONF = "spark.sql.streaming.stateStore.rocksdb.compression"
_COMPRESSION_NAMES = {0: "none", 1: "snappy", 2: "zlib", 3: "bzip2", 4: "lz4", 5: "lz4hc", 6: "xpress", 7: "zstd"}


def varint(data: bytes, pos: int) -> tuple[int, int]:
    """(value, next position) of a little-endian base-128 varint."""
    b = data[pos]
    if b < 0x80:
        return b, pos + 1
    result, shift = b & 0x7F, 7
    pos += 1
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def varint_bytes(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def zigzag(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


@dataclass(frozen=True)
class Handle:
    """Where a block is in its file (its trailer follows it)."""

    offset: int
    size: int


def decode_handle(raw: bytes) -> Handle:
    off, p = varint(raw, 0)
    size, _ = varint(raw, p)
    return Handle(off, size)


def encode_handle(h: Handle) -> bytes:
    return varint_bytes(h.offset) + varint_bytes(h.size)


# --- checksums -------------------------------------------------------------------------------

_CRC_TABLE: list[int] = []


def crc32c(data: bytes) -> int:
    if not _CRC_TABLE:
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
            _CRC_TABLE.append(c)
    table = _CRC_TABLE
    crc = 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


CHECKSUM_TYPES = {1: "CRC32C", 2: "xxHash32", 3: "xxHash64", 4: "XXH3"}


def block_checksum(kind: int, raw: bytes | memoryview, ctype: int) -> int:
    """The checksum RocksDB stores in the trailer of block `raw` of compression type `ctype`."""
    import xxhash

    if kind == 4:
        return (xxhash.xxh3_64_intdigest(raw) & 0xFFFFFFFF) ^ ((ctype * _XXH3_PRIME) & 0xFFFFFFFF)
    with_type = bytes(raw) + bytes([ctype])
    if kind == 1:
        crc = crc32c(with_type)
        return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
    if kind == 2:
        return xxhash.xxh32_intdigest(with_type)
    return xxhash.xxh64_intdigest(with_type) & 0xFFFFFFFF


def context_modifier(base: int, offset: int) -> int:
    """What format version 6 adds to a block's stored checksum (0 when the file has no base)."""
    if not base:
        return 0
    return (base ^ ((offset & 0xFFFFFFFF) + (offset >> 32))) & 0xFFFFFFFF


# --- decompression ---------------------------------------------------------------------------


def decompress_block(raw: bytes, ctype: int, where: str) -> bytes:
    """The contents of a block of compression type `ctype`; CorruptionError naming `where` when
    it does not decompress, UnsupportedCheckpointError for a type we cannot read here."""
    if ctype == 0:
        return raw
    if ctype == 1:
        return snappy_decompress(raw, where)
    try:
        n, p = varint(raw, 0)
    except (IndexError, ValueError):
        raise CorruptionError(f"{where} has a compressed block without its size") from None
    body = raw[p:]
    try:
        if ctype in (4, 5):
            import lz4.block

            out: bytes = lz4.block.decompress(body, uncompressed_size=n)
        elif ctype == 7:
            try:
                import zstandard
            except ImportError:
                raise UnsupportedCheckpointError(f"{where} has zstd blocks and `zstandard` is not installed",
                                                 hint="install zstandard, or read this state with Spark") from None
            out = zstandard.ZstdDecompressor().decompress(body, max_output_size=n)
        elif ctype == 2:
            import zlib

            out = zlib.decompressobj(-15).decompress(body, n)
        elif ctype == 3:
            import bz2

            out = bz2.decompress(body)
        else:
            name = _COMPRESSION_NAMES.get(ctype, f"type {ctype}")
            raise UnsupportedCheckpointError(
                f"{where} has {name}-compressed blocks",
                hint=f"key lookups read {COMPRESSION_CONF} none, snappy, z, bzip2, lz4, lz4hc and zstd")
    except UnsupportedCheckpointError:
        raise
    except Exception as exc:  # each library's own error type: a damaged block
        raise CorruptionError(f"{where} has a block that does not decompress ({exc})",
                              hint="restore an older snapshot, or re-read the checkpoint") from None
    if len(out) != n:
        raise CorruptionError(f"{where} has a block of {len(out)} bytes where its header says {n}")
    return out


def snappy_decompress(raw: bytes, where: str) -> bytes:
    """A raw snappy stream (the length as a varint, then literals and copies)."""
    try:
        n, pos = varint(raw, 0)
        out = bytearray()
        end = len(raw)
        while pos < end:
            tag = raw[pos]
            pos += 1
            kind = tag & 3
            if kind == 0:  # literal
                length = tag >> 2
                if length >= 60:
                    extra = length - 59
                    length = int.from_bytes(raw[pos:pos + extra], "little")
                    pos += extra
                length += 1
                if pos + length > end:
                    raise ValueError("a literal runs past the end")
                out += raw[pos:pos + length]
                pos += length
                continue
            if kind == 1:
                length = ((tag >> 2) & 7) + 4
                offset = ((tag >> 5) << 8) | raw[pos]
                pos += 1
            elif kind == 2:
                length = (tag >> 2) + 1
                offset = raw[pos] | (raw[pos + 1] << 8)
                pos += 2
            else:
                length = (tag >> 2) + 1
                offset = int.from_bytes(raw[pos:pos + 4], "little")
                pos += 4
            if offset == 0 or offset > len(out):
                raise ValueError(f"a copy from {offset} bytes back")
            start = len(out) - offset
            if offset >= length:
                out += out[start:start + length]
            else:  # an overlapping copy repeats the last `offset` bytes
                for i in range(length):
                    out.append(out[start + i])
    except (IndexError, ValueError) as exc:
        raise CorruptionError(f"{where} has a snappy block that does not decompress ({exc})",
                              hint="restore an older snapshot, or re-read the checkpoint") from None
    if len(out) != n:
        raise CorruptionError(f"{where} has a snappy block of {len(out)} bytes where its header says {n}")
    return bytes(out)


# --- entries ---------------------------------------------------------------------------------


def restarts(block: bytes, where: str) -> tuple[int, list[int]]:
    """(where the entries end, the restart offsets) of a block."""
    if len(block) < 4:
        raise CorruptionError(f"{where} has a block too short for its restart count")
    packed = _U32.unpack_from(block, len(block) - 4)[0]
    if packed >> 31:
        raise UnsupportedCheckpointError(f"{where} uses a hash data-block index",
                                         hint="key lookups read tables with the binary-search block index")
    limit = len(block) - 4 - 4 * packed
    if limit < 0:
        raise CorruptionError(f"{where} has a block with an impossible restart count")
    return limit, list(struct.unpack_from(f"<{packed}I", block, limit))


Layout = tuple[int, list[int], frozenset[int]]  # a block's entries' end, restart offsets, and as a set


def layout(block: bytes, where: str) -> Layout:
    """A block's restart array, parsed once (an index block is searched by every lookup)."""
    limit, offsets = restarts(block, where)
    return limit, offsets, frozenset(offsets)


def iter_entries(block: bytes, where: str, *, delta_values: bool = False, start: int = 0,
                 limit: int | None = None, restart_set: frozenset[int] | None = None
                 ) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) of a block's entries from `start` (a restart point) on. With
    `delta_values` (an index block of format version >= 4) each value is the entry's block
    handle re-encoded as (offset, size) varints."""
    if limit is None or (delta_values and restart_set is None):
        limit, _, restart_set = layout(block, where)
    pos = start
    key = b""
    prev: Handle | None = None
    try:
        while pos < limit:
            entry_start = pos
            shared, pos = varint(block, pos)
            non_shared, pos = varint(block, pos)
            if not delta_values:
                vlen, pos = varint(block, pos)
            key = key[:shared] + block[pos:pos + non_shared]
            pos += non_shared
            if delta_values:
                if prev is None or (restart_set is not None and entry_start in restart_set):
                    off, pos = varint(block, pos)
                    size, pos = varint(block, pos)
                else:
                    d, pos = varint(block, pos)
                    off, size = prev.offset + prev.size + TRAILER, prev.size + zigzag(d)
                prev = Handle(off, size)
                yield key, encode_handle(prev)
            else:
                value = block[pos:pos + vlen]
                pos += vlen
                if pos > limit:
                    raise IndexError
                yield key, value
    except (IndexError, ValueError):
        raise CorruptionError(f"{where} has a block whose entries run past its end") from None
    if pos != limit:
        raise CorruptionError(f"{where} has a block whose entries do not end at its restart array")


def restart_key(block: bytes, offset: int, where: str, *, delta_values: bool = False) -> bytes:
    """The key of the entry at a restart point (stored whole there)."""
    try:
        shared, pos = varint(block, offset)
        non_shared, pos = varint(block, pos)
        if not delta_values:
            _, pos = varint(block, pos)
    except (IndexError, ValueError):
        raise CorruptionError(f"{where} has a restart point past its block's end") from None
    if shared:
        raise CorruptionError(f"{where} has a restart point that shares a key prefix")
    return block[pos:pos + non_shared]


def seek(block: bytes, where: str, target: bytes, *, user_keys: bool, delta_values: bool = False,
         parsed: Layout | None = None) -> tuple[int, int, frozenset[int]]:
    """(the last restart point whose key is below `target`, the entries' end, the restart
    offsets): where a scan for `target` starts. `user_keys`: the block's keys are user keys
    (else internal keys, compared by their user key). `parsed`: the block's `layout`."""
    limit, offsets, offset_set = parsed or layout(block, where)
    lo, hi = 0, len(offsets) - 1
    while lo < hi:  # the last restart whose key < target
        mid = (lo + hi + 1) // 2
        key = restart_key(block, offsets[mid], where, delta_values=delta_values)
        if (key if user_keys else key[:-8]) < target:
            lo = mid
        else:
            hi = mid - 1
    return (offsets[lo] if offsets else 0), limit, offset_set
