"""A read-only reader of RocksDB block-based table files (`.sst`), as Spark's RocksDB state
store writes them.

Why our own reader and not a RocksDB binding: the maintained Python binding (rocksdict)
cannot be given a merge operator, and Spark's list state (transformWithState ListState)
is written with RocksDB merges (`StringAppendOperator`, delimiter ','): reading such a
key through the binding fails. Reading the table files directly also lets a lookup
decompress only the one block that holds a key.

What is read, for the options Spark sets (`RocksDBConf`: block-based table, format
version 5, LZ4 compression, binary-search index, bloom filter, XXH3 checksums):

- footer (last 53 bytes): checksum type (1) | metaindex handle | index handle (varints,
  padded to 40 bytes) | format version (4, LE) | magic 0x88e241b785f4cff7 (8, LE);
- every block is followed by a 5-byte trailer: compression type (1) | checksum (4, LE),
  the checksum over the block and its type byte (XXH3: the low 32 bits of XXH3-64 of the
  block, xor type * 0x6b9083d9; CRC32C: masked CRC32C), verified on every read;
- a compressed block starts with its decompressed size (varint32) (LZ4 raw block);
- a block holds prefix-compressed entries `shared | non-shared | value length (varint32s)
  | key delta | value`, then restart offsets (4 bytes each) and their count (4); index
  blocks of format version >= 4 leave out the value length and delta-encode block handles;
- keys are internal keys: user key | (sequence << 8 | type) (8, LE); type 1 = value,
  0 = deletion, 7 = single deletion, 2 = merge operand.

Anything else (another table format, a range deletion, blob or wide-column entries, a
hash data-block index, a compression other than none/LZ4/LZ4HC/zstd) is refused by name.
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from collections import OrderedDict
from dataclasses import dataclass

from airflow_provider_streamstate.engine.core.errors import CorruptionError, UnsupportedCheckpointError

MAGIC = 0x88E241B785F4CFF7
LEGACY_MAGIC = 0xDB4775248B80FB57
FOOTER = 53
TRAILER = 5
TYPE_DELETION, TYPE_VALUE, TYPE_MERGE, TYPE_SINGLE_DELETION = 0x0, 0x1, 0x2, 0x7
_KNOWN_TYPES = {TYPE_DELETION, TYPE_VALUE, TYPE_MERGE, TYPE_SINGLE_DELETION}
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_XXH3_PRIME = 0x6B9083D9


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


def _zigzag(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


@dataclass(frozen=True)
class Handle:
    offset: int
    size: int


def _crc32c(data: bytes) -> int:
    table = _crc_table()
    crc = 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


_CRC_TABLE: list[int] = []


def _crc_table() -> list[int]:
    if not _CRC_TABLE:
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
            _CRC_TABLE.append(c)
    return _CRC_TABLE


class SstFile:
    """One table file held in memory: its index, and its blocks decompressed on demand."""

    def __init__(self, data: bytes, name: str, *, block_cache: int = 64) -> None:
        self.data = data
        self.name = name
        self._blocks: OrderedDict[int, bytes] = OrderedDict()
        self._block_cache = block_cache
        if len(data) < FOOTER:
            raise self._corrupt(f"has {len(data)} bytes, fewer than a table footer")
        footer = data[-FOOTER:]
        magic = _U64.unpack_from(footer, FOOTER - 8)[0]
        if magic == LEGACY_MAGIC:
            raise UnsupportedCheckpointError(f"{name} is a legacy (format version 0) RocksDB table",
                                             hint="key lookups read RocksDB format versions 2 to 5")
        if magic != MAGIC:
            raise self._corrupt("does not end with a block-based table footer (truncated or damaged)")
        self.format_version = _U32.unpack_from(footer, FOOTER - 12)[0]
        if not 2 <= self.format_version <= 5:
            raise UnsupportedCheckpointError(
                f"{name} is a RocksDB table of format version {self.format_version}",
                hint="key lookups read format versions 2 to 5 (Spark's rocksdb.formatVersion default is 5)")
        self.checksum_type = footer[0]
        if self.checksum_type not in (1, 4):
            raise UnsupportedCheckpointError(f"{name} uses RocksDB checksum type {self.checksum_type}",
                                             hint="key lookups verify CRC32C and XXH3 block checksums")
        try:
            off, p = varint(footer, 1)
            size, p = varint(footer, p)
            self.metaindex = Handle(off, size)
            off, p = varint(footer, p)
            size, p = varint(footer, p)
            self.index_handle = Handle(off, size)
        except (IndexError, ValueError):
            raise self._corrupt("has an unreadable footer") from None
        self.properties = self._read_properties()
        self.index_key_is_user_key = self.properties.get(b"rocksdb.index.key.is.user.key", b"\0") not in (b"\0", b"")
        self.index_delta = self.properties.get(b"rocksdb.index.value.is.delta.encoded", b"\0") not in (b"\0", b"")
        comparator = self.properties.get(b"rocksdb.comparator", b"leveldb.BytewiseComparator")
        if comparator != b"leveldb.BytewiseComparator":
            raise UnsupportedCheckpointError(f"{name} orders keys with {comparator.decode(errors='replace')}",
                                             hint="key lookups read tables of the bytewise comparator")
        self._index = self._read_index()
        # The separators' user keys, for binary search.
        self._index_user_keys = [k if self.index_key_is_user_key else k[:-8] for k, _ in self._index]
        if self.checksum_type == 4:
            self.verify()

    def verify(self) -> None:
        """Check every block's XXH3 checksum (data, filter and meta blocks): a damaged table
        fails when it is loaded, whichever block the key is in, and nothing of it is cached.
        (CRC32C tables, not what Spark writes, are checked block by block as they are read.)"""
        import xxhash

        handles = [h for _, h in self._index]
        for _, raw in self.entries(self.block(self.metaindex)):
            handles.append(_decode_handle(raw))
        for h in handles:
            end = h.offset + h.size
            if h.offset < 0 or end + TRAILER > len(self.data):
                raise self._corrupt(f"names a block at {h.offset}+{h.size} beyond its {len(self.data)} bytes")
            ctype = self.data[end]
            (stored,) = _U32.unpack_from(self.data, end + 1)
            actual = (xxhash.xxh3_64_intdigest(self.data[h.offset:end]) & 0xFFFFFFFF) ^ \
                ((ctype * _XXH3_PRIME) & 0xFFFFFFFF)
            if actual != stored:
                raise self._corrupt(f"has a block at {h.offset} whose checksum does not match")

    def _corrupt(self, what: str) -> CorruptionError:
        return CorruptionError(f"{self.name} {what}", hint="restore an older snapshot, or re-read the checkpoint")

    # --- blocks -------------------------------------------------------------------------

    def block(self, h: Handle) -> bytes:
        cached = self._blocks.get(h.offset)
        if cached is not None:
            self._blocks.move_to_end(h.offset)
            return cached
        end = h.offset + h.size
        if h.offset < 0 or end + TRAILER > len(self.data):
            raise self._corrupt(f"names a block at {h.offset}+{h.size} beyond its {len(self.data)} bytes")
        raw = self.data[h.offset:end]
        ctype = self.data[end]
        (stored,) = _U32.unpack_from(self.data, end + 1)
        if self.checksum_type == 4:
            import xxhash

            actual = (xxhash.xxh3_64_intdigest(raw) & 0xFFFFFFFF) ^ ((ctype * _XXH3_PRIME) & 0xFFFFFFFF)
        else:
            crc = _crc32c(raw + bytes([ctype]))
            actual = ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
        if actual != stored:
            raise self._corrupt(f"has a block at {h.offset} whose checksum does not match")
        out = self._decompress(raw, ctype)
        self._blocks[h.offset] = out
        if len(self._blocks) > self._block_cache:
            self._blocks.popitem(last=False)
        return out

    def _decompress(self, raw: bytes, ctype: int) -> bytes:
        if ctype == 0:
            return raw
        try:
            n, p = varint(raw, 0)
        except (IndexError, ValueError):
            raise self._corrupt("has a compressed block without its size") from None
        if ctype in (4, 5):  # LZ4, LZ4HC
            import lz4.block

            try:
                out: bytes = lz4.block.decompress(raw[p:], uncompressed_size=n)
            except lz4.block.LZ4BlockError as exc:
                raise self._corrupt(f"has a block that does not decompress ({exc})") from None
            return out
        if ctype == 7:
            try:
                import zstandard
            except ImportError:
                raise UnsupportedCheckpointError(f"{self.name} has zstd blocks and `zstandard` is not installed",
                                                 hint="install zstandard, or read this state with Spark") from None
            return zstandard.ZstdDecompressor().decompress(raw[p:], max_output_size=n)
        names = {1: "snappy", 2: "zlib", 3: "bzip2", 6: "xpress"}
        raise UnsupportedCheckpointError(
            f"{self.name} has {names.get(ctype, f'type {ctype}')}-compressed blocks",
            hint="key lookups read RocksDB tables compressed with LZ4 (Spark's default) or zstd, or uncompressed")

    def entries(self, block: bytes, *, index: bool = False) -> list[tuple[bytes, bytes]]:
        """Every (key, value) of a block, in order. Index blocks with delta-encoded values
        give each entry's block handle re-encoded as (offset, size) varints."""
        if len(block) < 4:
            raise self._corrupt("has a block too short for its restart count")
        packed = _U32.unpack_from(block, len(block) - 4)[0]
        if packed >> 31:
            raise UnsupportedCheckpointError(f"{self.name} uses a hash data-block index",
                                             hint="key lookups read tables with the binary-search block index")
        limit = len(block) - 4 - 4 * packed
        if limit < 0:
            raise self._corrupt("has a block with an impossible restart count")
        out: list[tuple[bytes, bytes]] = []
        pos = 0
        key = b""
        delta_values = index and self.index_delta
        prev: Handle | None = None
        restarts = {(_U32.unpack_from(block, limit + 4 * i)[0]) for i in range(packed)} if delta_values else set()
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
                    if entry_start in restarts or prev is None:
                        off, pos = varint(block, pos)
                        size, pos = varint(block, pos)
                    else:
                        d, pos = varint(block, pos)
                        off, size = prev.offset + prev.size + TRAILER, prev.size + _zigzag(d)
                    prev = Handle(off, size)
                    out.append((key, _encode_handle(prev)))
                else:
                    out.append((key, block[pos:pos + vlen]))
                    pos += vlen
        except (IndexError, ValueError):
            raise self._corrupt("has a block whose entries run past its end") from None
        if pos != limit:
            raise self._corrupt("has a block whose entries do not end at its restart array")
        return out

    # --- meta -----------------------------------------------------------------------------

    def _read_properties(self) -> dict[bytes, bytes]:
        meta = dict(self.entries(self.block(self.metaindex)))
        if meta.get(b"rocksdb.range_del"):
            h = _decode_handle(meta[b"rocksdb.range_del"])
            if h.size and self.entries(self.block(h)):
                raise UnsupportedCheckpointError(f"{self.name} holds range deletions",
                                                 hint="Spark's state store does not write them; read with Spark")
        ph = meta.get(b"rocksdb.properties")
        return dict(self.entries(self.block(_decode_handle(ph)))) if ph else {}

    def _read_index(self) -> list[tuple[bytes, Handle]]:
        return [(k, _decode_handle(v)) for k, v in self.entries(self.block(self.index_handle), index=True)]

    # --- lookups --------------------------------------------------------------------------

    def scan_all(self) -> list[tuple[bytes, int, int, bytes]]:
        """Every entry of the table (user key, sequence, type, value), in the table's order."""
        out: list[tuple[bytes, int, int, bytes]] = []
        for _, handle in self._index:
            for ikey, value in self.entries(self.block(handle)):
                if len(ikey) < 8:
                    raise self._corrupt("has an internal key shorter than 8 bytes")
                tag = _U64.unpack_from(ikey, len(ikey) - 8)[0]
                if tag & 0xFF not in _KNOWN_TYPES:
                    raise UnsupportedCheckpointError(
                        f"{self.name} holds an entry of RocksDB value type {tag & 0xFF:#x}",
                        hint="key lookups read puts, deletions and merges (what Spark writes)")
                out.append((ikey[:-8], tag >> 8, tag & 0xFF, value))
        return out

    def scan(self, lo: bytes, hi: bytes | None) -> list[tuple[bytes, int, int, bytes]]:
        """Every entry whose user key is in [lo, hi) (hi None: only lo itself, exactly) as
        (user key, sequence, type, value), in the table's order."""
        out: list[tuple[bytes, int, int, bytes]] = []
        i = bisect_left(self._index_user_keys, lo)
        while i < len(self._index):
            for ikey, value in self.entries(self.block(self._index[i][1])):
                if len(ikey) < 8:
                    raise self._corrupt("has an internal key shorter than 8 bytes")
                ukey = ikey[:-8]
                if ukey < lo:
                    continue
                if (hi is None and ukey != lo) or (hi is not None and ukey >= hi):
                    return out
                tag = _U64.unpack_from(ikey, len(ikey) - 8)[0]
                kind = tag & 0xFF
                if kind not in _KNOWN_TYPES:
                    raise UnsupportedCheckpointError(
                        f"{self.name} holds an entry of RocksDB value type {kind:#x}",
                        hint="key lookups read puts, deletions and merges (what Spark writes)")
                out.append((ukey, tag >> 8, kind, value))
            i += 1
        return out


def _decode_handle(raw: bytes) -> Handle:
    off, p = varint(raw, 0)
    size, _ = varint(raw, p)
    return Handle(off, size)


def _encode_handle(h: Handle) -> bytes:
    return _varint_bytes(h.offset) + _varint_bytes(h.size)


def _varint_bytes(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def resolve(entries: list[tuple[bytes, int, int, bytes]]) -> dict[bytes, tuple[str, bytes | list[bytes]]]:
    """Entries of several tables -> per user key what a read sees: ("V", value), ("D", b"")
    for a deleted key, or ("M", operands oldest first) for merges with no base below them."""
    by_key: dict[bytes, list[tuple[int, int, bytes]]] = {}
    for ukey, seq, kind, value in entries:
        by_key.setdefault(ukey, []).append((seq, kind, value))
    out: dict[bytes, tuple[str, bytes | list[bytes]]] = {}
    for ukey, versions in by_key.items():
        versions.sort(key=lambda v: v[0], reverse=True)
        operands: list[bytes] = []
        state: tuple[str, bytes | list[bytes]] | None = None
        for _seq, kind, value in versions:
            if kind == TYPE_MERGE:
                operands.append(value)
                continue
            if kind == TYPE_VALUE:
                state = ("V", b",".join([value, *reversed(operands)]))
            else:  # a deletion: merges above it start from nothing
                state = ("V", b",".join(reversed(operands))) if operands else ("D", b"")
            break
        if state is None:
            state = ("M", list(reversed(operands)))
        out[ukey] = state
    return out
