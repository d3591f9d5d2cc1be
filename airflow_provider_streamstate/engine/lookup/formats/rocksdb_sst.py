"""A read-only reader of RocksDB block-based table files (`.sst`), as Spark's RocksDB state
store writes them, that reads what one key needs.

Why our own reader and not a RocksDB binding: the maintained Python binding (rocksdict)
cannot be given a merge operator, and Spark's list state (transformWithState ListState)
is written with RocksDB merges (`StringAppendOperator`, delimiter ','): reading such a
key through the binding fails. Reading the table files directly also lets a lookup fetch
only the blocks a key needs, by ranged reads of the file.

What Spark sets (`RocksDB.scala`, `RocksDBConf`, Spark 4.1): a block-based table with
`spark.sql.streaming.stateStore.rocksdb.blockSizeKB` (4), `.formatVersion` (5),
`.compression` (lz4), a full bloom filter (`new BloomFilter()`), RocksDB's default index
(binary search, one index block) and checksum (XXH3), no prefix extractor. A table is read
as RocksDB lays it out at its end, `[data blocks] [filter] [index] [properties] [metaindex]
[footer]`:

- footer (last 53 bytes): checksum type (1) | metaindex handle | index handle (varints,
  padded to 40 bytes) | format version (4, LE) | magic 0x88e241b785f4cff7 (8, LE); format
  version 6: checksum type | 0x3e007a00 | footer checksum (4) | base context checksum (4) |
  metaindex size (4) | 24 zeros | format version | magic, the index handle then in the
  metaindex (`rocksdb.index`);
- the metaindex names the properties (`rocksdb.properties`), the filter
  (`fullfilter.<policy>`, `rocksdb_filter`) and the range deletions;
- keys are internal keys: user key | (sequence << 8 | type) (8, LE); type 1 = value,
  0 = deletion, 7 = single deletion, 2 = merge operand.

Opening a table reads its tail once (and the rest of its filter and index when they do not
fit in it): footer, metaindex, properties, index and filter. A key then costs one data block
(or none, when the filter rules it out), verified by its own checksum
(`rocksdb_blocks`): a table read by ranges is never hashed whole. `entries()` reads every
block in order from a whole-file read, without building a list.

Refused by name: another table format, a partitioned (two-level) index or an index with
first keys (`rocksdb.block.based.table.index.type` 2 or 3: Spark's RocksDB configuration
cannot set one), range deletions, a hash data-block index, other comparators, format
versions above 6. Filters other than the bloom filters Spark writes are not used (a key is
then looked for in its block: slower, never wrong).
"""

from __future__ import annotations

import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator

from airflow_provider_streamstate.engine.core.errors import CorruptionError, UnsupportedCheckpointError
from airflow_provider_streamstate.engine.lookup.formats.rocksdb_blocks import (
    CHECKSUM_TYPES,
    TRAILER,
    Handle,
    block_checksum,
    context_modifier,
    decode_handle,
    decompress_block,
    iter_entries,
    layout,
    seek,
    varint,
)
from airflow_provider_streamstate.engine.lookup.formats.rocksdb_filter import BloomFilter, parse_full_filter

MAGIC = 0x88E241B785F4CFF7
LEGACY_MAGIC = 0xDB4775248B80FB57
FOOTER = 53
TAIL_READ = 32 << 10  # what opening a table reads first, from its end
FORMAT_CONF = "spark.sql.streaming.stateStore.rocksdb.formatVersion"
TYPE_DELETION, TYPE_VALUE, TYPE_MERGE, TYPE_SINGLE_DELETION = 0x0, 0x1, 0x2, 0x7
_KNOWN_TYPES = {TYPE_DELETION, TYPE_VALUE, TYPE_MERGE, TYPE_SINGLE_DELETION}
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_INDEX_TYPES = {0: "binary search", 1: "hash search", 2: "two-level (partitioned)", 3: "binary search with first key"}

RangeRead = Callable[[int, int], bytes]  # (offset, length) -> exactly those bytes of the file
Entry = tuple[bytes, int, int, bytes]  # user key, sequence, type, value


class SstFile:
    """One table: its footer, properties, index and filter, read when it is made; its data
    blocks read (through `read`, or a lookup's own reader) and cached as they are needed.

    `source`: the whole file's bytes, or a function reading a range of it (then `size` is
    the file's size). Thread-safe: a cached table serves concurrent lookups."""

    def __init__(self, source: bytes | RangeRead, name: str, *, size: int | None = None,
                 block_cache_bytes: int = 1 << 20) -> None:
        self.name = name
        if isinstance(source, (bytes, bytearray, memoryview)):
            data = bytes(source)
            self.size = len(data)
            self.whole: bytes | None = data
            self._read: RangeRead = lambda off, n: data[off:off + n]
        else:
            if size is None:
                raise ValueError("a ranged table needs its size")
            self.size, self.whole, self._read = size, None, source
        self._lock = threading.Lock()
        self._blocks: OrderedDict[int, bytes] = OrderedDict()
        self._blocks_bytes = 0
        self.block_cache_bytes = block_cache_bytes
        self.meta_bytes = 0  # bytes of the footer, metaindex, properties, index and filter
        self._open()

    # --- opening -------------------------------------------------------------------------

    def _open(self) -> None:
        if self.size < FOOTER:
            raise self._corrupt(f"has {self.size} bytes, fewer than a table footer")
        tail_at = max(0, self.size - TAIL_READ)
        self._tail_at, self._tail = tail_at, self._read(tail_at, self.size - tail_at)
        self.meta_bytes = len(self._tail)
        footer = self._tail[-FOOTER:]
        magic = _U64.unpack_from(footer, FOOTER - 8)[0]
        if magic == LEGACY_MAGIC:
            raise UnsupportedCheckpointError(f"{self.name} is a legacy (format version 0) RocksDB table",
                                             hint="key lookups read RocksDB format versions 2 to 6")
        if magic != MAGIC:
            raise self._corrupt("does not end with a block-based table footer (truncated or damaged)")
        self.format_version = _U32.unpack_from(footer, FOOTER - 12)[0]
        if not 2 <= self.format_version <= 6:
            raise UnsupportedCheckpointError(f"{self.name} is a RocksDB table of format version {self.format_version}",
                                             hint=f"key lookups read {FORMAT_CONF} 2 to 6 (Spark's default is 5)")
        self.checksum_type = footer[0]
        if self.checksum_type not in CHECKSUM_TYPES:
            raise UnsupportedCheckpointError(f"{self.name} uses RocksDB checksum type {self.checksum_type}",
                                             hint="key lookups verify CRC32C, xxHash32, xxHash64 and XXH3 blocks")
        self.context_base = 0
        index_handle: Handle | None = None
        try:
            if self.format_version >= 6:
                if footer[1:5] != b"\x3e\x00\x7a\x00":
                    raise self._corrupt("has a format version 6 footer without its marker")
                self.context_base = _U32.unpack_from(footer, 9)[0]
                meta_size = _U32.unpack_from(footer, 13)[0]
                self.metaindex = Handle(self.size - FOOTER - TRAILER - meta_size, meta_size)
            else:
                off, p = varint(footer, 1)
                size, p = varint(footer, p)
                self.metaindex = Handle(off, size)
                off, p = varint(footer, p)
                size, p = varint(footer, p)
                index_handle = Handle(off, size)
        except (IndexError, ValueError):
            raise self._corrupt("has an unreadable footer") from None
        meta = dict(iter_entries(self._meta_block(self.metaindex), self.name))
        if index_handle is None:
            if b"rocksdb.index" not in meta:
                raise self._corrupt("names no index block in its metaindex")
            index_handle = decode_handle(meta[b"rocksdb.index"])
        self.index_handle = index_handle
        if meta.get(b"rocksdb.range_del"):
            h = decode_handle(meta[b"rocksdb.range_del"])
            if h.size and list(iter_entries(self._meta_block(h), self.name)):
                raise UnsupportedCheckpointError(f"{self.name} holds range deletions",
                                                 hint="Spark's state store does not write them; read with Spark")
        filter_name = next((k for k in meta if k.startswith(b"fullfilter.")), None)
        others = [k for k in meta if k.startswith((b"partitionedfilter.", b"filter."))]
        # Filter, index and properties sit together before the metaindex: one more read at most.
        wanted = [self.index_handle]
        if filter_name is not None:
            wanted.append(decode_handle(meta[filter_name]))
        ph = meta.get(b"rocksdb.properties")
        if ph:
            wanted.append(decode_handle(ph))
        first = min(h.offset for h in wanted)
        if first < self._tail_at:
            more = self._read(first, self._tail_at - first)
            self.meta_bytes += len(more)
            self._tail_at, self._tail = first, more + self._tail
        self.properties = dict(iter_entries(self._meta_block(decode_handle(ph)), self.name)) if ph else {}
        props = self.properties
        comparator = props.get(b"rocksdb.comparator", b"leveldb.BytewiseComparator")
        if comparator != b"leveldb.BytewiseComparator":
            raise UnsupportedCheckpointError(f"{self.name} orders keys with {comparator.decode(errors='replace')}",
                                             hint="key lookups read tables of the bytewise comparator")
        raw_type = props.get(b"rocksdb.block.based.table.index.type")
        index_type = _U32.unpack_from(raw_type)[0] if raw_type and len(raw_type) == 4 else 0
        if index_type not in (0, 1):
            raise UnsupportedCheckpointError(
                f"{self.name} has a {_INDEX_TYPES.get(index_type, f'type {index_type}')} index "
                "(RocksDB's BlockBasedTableOptions.index_type)",
                hint="key lookups read binary-search indexes, the only kind Spark's RocksDB configuration writes; "
                "read this state with Spark")
        self.index_key_is_user_key = props.get(b"rocksdb.index.key.is.user.key", b"\0") not in (b"\0", b"")
        self.index_delta = props.get(b"rocksdb.index.value.is.delta.encoded", b"\0") not in (b"\0", b"")
        self._index_block = self._meta_block(self.index_handle)
        self._index_layout = layout(self._index_block, self.name)
        whole_keys = props.get(b"rocksdb.block.based.table.whole.key.filtering", b"1") not in (b"\0", b"0")
        prefix = props.get(b"rocksdb.prefix.extractor.name", b"nullptr")
        self.filter: BloomFilter | None = None
        self.filter_bytes = decode_handle(meta[filter_name]).size if filter_name is not None else 0
        if filter_name is not None and whole_keys and prefix in (b"nullptr", b""):
            self.filter = parse_full_filter(self._meta_block(decode_handle(meta[filter_name])))
        self.filter_kind = (self.filter.kind if self.filter else
                            (filter_name or (others[0] if others else b"none")).decode(errors="replace"))
        self._tail = b""  # what was read is parsed; keep only the parsed parts

    def _meta_block(self, h: Handle) -> bytes:
        """A block inside what opening read (the tail), verified and decompressed."""
        start = h.offset - self._tail_at
        end = start + h.size + TRAILER
        if h.offset < 0 or h.offset + h.size + TRAILER > self.size:
            raise self._corrupt(f"names a block at {h.offset}+{h.size} beyond its {self.size} bytes")
        if start < 0:
            raw = self._read(h.offset, h.size + TRAILER)
            self.meta_bytes += len(raw)
        else:
            raw = self._tail[start:end]
        return self._checked(h, raw)

    def _checked(self, h: Handle, raw: bytes) -> bytes:
        if len(raw) != h.size + TRAILER:
            raise self._corrupt(f"gave {len(raw)} bytes for a block of {h.size + TRAILER} at {h.offset}")
        body, ctype = raw[:h.size], raw[h.size]
        stored = (_U32.unpack_from(raw, h.size + 1)[0] - context_modifier(self.context_base, h.offset)) & 0xFFFFFFFF
        if block_checksum(self.checksum_type, body, ctype) != stored:
            raise self._corrupt(f"has a block at {h.offset} whose checksum does not match")
        return decompress_block(body, ctype, self.name)

    def _corrupt(self, what: str) -> CorruptionError:
        return CorruptionError(f"{self.name} {what}", hint="restore an older snapshot, or re-read the checkpoint")

    # --- blocks --------------------------------------------------------------------------

    def block(self, h: Handle, read: RangeRead | None = None) -> bytes:
        """A data block, verified and decompressed; from the cache when it was read before."""
        with self._lock:
            cached = self._blocks.get(h.offset)
            if cached is not None:
                self._blocks.move_to_end(h.offset)
                return cached
        if h.offset < 0 or h.offset + h.size + TRAILER > self.size:
            raise self._corrupt(f"names a block at {h.offset}+{h.size} beyond its {self.size} bytes")
        source = self._read if self.whole is not None or read is None else read
        out = self._checked(h, source(h.offset, h.size + TRAILER))
        if self.whole is None:  # a whole file in memory needs no second copy of its blocks
            with self._lock:
                if h.offset not in self._blocks:
                    self._blocks[h.offset] = out
                    self._blocks_bytes += len(out)
                while self._blocks_bytes > self.block_cache_bytes and len(self._blocks) > 1:
                    _, old = self._blocks.popitem(last=False)
                    self._blocks_bytes -= len(old)
        return out

    def _index_from(self, target: bytes) -> Iterator[Handle]:
        """The data blocks from the first whose separator is at or above user key `target`."""
        user = self.index_key_is_user_key
        start, limit, offsets = seek(self._index_block, self.name, target, user_keys=user,
                                     delta_values=self.index_delta, parsed=self._index_layout)
        for key, value in iter_entries(self._index_block, self.name, delta_values=self.index_delta, start=start,
                                       limit=limit, restart_set=offsets):
            if (key if user else key[:-8]) >= target:
                yield decode_handle(value)

    def index(self) -> list[tuple[bytes, Handle]]:
        """Every index entry (separator key, data block handle), in order."""
        return [(k, decode_handle(v)) for k, v in iter_entries(self._index_block, self.name,
                                                               delta_values=self.index_delta)]

    def _entry(self, ikey: bytes, value: bytes) -> Entry:
        if len(ikey) < 8:
            raise self._corrupt("has an internal key shorter than 8 bytes")
        tag = _U64.unpack_from(ikey, len(ikey) - 8)[0]
        if tag & 0xFF not in _KNOWN_TYPES:
            raise UnsupportedCheckpointError(
                f"{self.name} holds an entry of RocksDB value type {tag & 0xFF:#x}",
                hint="key lookups read puts, deletions and merges (what Spark writes)")
        return ikey[:-8], tag >> 8, tag & 0xFF, value

    # --- reading -------------------------------------------------------------------------

    def may_contain(self, key: bytes) -> bool:
        """False when the table's filter rules the user key out."""
        return self.filter is None or self.filter.may_contain(key)

    def entries(self, read: RangeRead | None = None) -> Iterator[Entry]:
        """Every entry of the table (user key, sequence, type, value), in the table's order,
        block by block: nothing but the block being read is held. Meant for a table read whole
        (the digest, a full scan): one read of the file costs less than a ranged read per block."""
        for _, handle in self.index():
            for ikey, value in iter_entries(self.block(handle, read), self.name):
                yield self._entry(ikey, value)

    def scan(self, lo: bytes, hi: bytes | None, read: RangeRead | None = None) -> list[Entry]:
        """Every entry whose user key is in [lo, hi) (hi None: only lo itself, exactly) as
        (user key, sequence, type, value), in the table's order. A single key the filter
        rules out costs no read."""
        if hi is None and not self.may_contain(lo):
            return []
        out: list[Entry] = []
        for handle in self._index_from(lo):
            block = self.block(handle, read)
            start, limit, offsets = seek(block, self.name, lo, user_keys=False)
            for ikey, value in iter_entries(block, self.name, start=start, limit=limit, restart_set=offsets):
                ukey = ikey[:-8]
                if ukey < lo:
                    continue
                if (hi is None and ukey != lo) or (hi is not None and ukey >= hi):
                    return out
                out.append(self._entry(ikey, value))
        return out


def resolve(entries: list[Entry]) -> dict[bytes, tuple[str, bytes | list[bytes]]]:
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
