"""The key range of each table of a RocksDB checkpoint, from the MANIFEST in Spark's zip.

Spark's `<v>.zip` holds RocksDB's MANIFEST beside its own `metadata`. The MANIFEST is a log
(32 KiB blocks of records `crc (4) | length (2) | type (1) | data`, a record split across
blocks as FIRST/MIDDLE/LAST; types 5-8 are the recyclable forms with a 4-byte log number
more) of VersionEdits: varint tags, each followed by its fields. What is read here:

    1 comparator, 2/3/4/9/10 numbers, 5 compact cursor, 6 deleted file (level, number),
    7/100/102/103 a new file (level, number, [path id], size, smallest and largest internal
    key, [smallest and largest sequence]; 103 then its own tagged fields up to tag 1),
    200 column family, 201/202 add/drop one, 203 max column family, 300 atomic group,
    400/401 blob files; a tag with bit 13 set is skippable (a length-prefixed value).

The live files of the default column family, replayed edit by edit, give each table its
level, smallest and largest user key and sequence numbers: a lookup then opens only the
tables whose range holds the key, newest first. It is used only when it is consistent with
Spark's own list of the zip's tables (the same file numbers and sizes); else, or when
anything in it is not understood, `table_ranges` returns None and every table is consulted.
The zip's CRC-32 has already checked the MANIFEST's bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from airflow_provider_streamstate.engine.lookup.formats.rocksdb_blocks import varint

_BLOCK = 32768
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4
_SAFE_IGNORE = 1 << 13


@dataclass(frozen=True)
class TableRange:
    number: int
    level: int
    size: int
    smallest: bytes  # user keys
    largest: bytes
    smallest_seq: int
    largest_seq: int

    def holds(self, lo: bytes, hi: bytes | None) -> bool:
        """Whether a key in [lo, hi) (hi None: lo alone) can be in the table."""
        if hi is None:
            return self.smallest <= lo <= self.largest
        return lo <= self.largest and self.smallest < hi


class _Unreadable(Exception):
    pass


def _records(data: bytes) -> list[bytes]:
    out: list[bytes] = []
    pending: bytearray | None = None
    pos = 0
    n = len(data)
    while pos + 7 <= n:
        room = _BLOCK - pos % _BLOCK
        if room < 7:  # a block's tail too short for a header is padding
            pos += room
            continue
        length = data[pos + 4] | (data[pos + 5] << 8)
        kind = data[pos + 6]
        header = 7
        if kind in (5, 6, 7, 8):
            header, kind = 11, kind - 4
        if kind == 0 and length == 0:  # preallocated zeros: the end
            break
        body = data[pos + header:pos + header + length]
        if len(body) != length or kind not in (_FULL, _FIRST, _MIDDLE, _LAST):
            raise _Unreadable
        pos += header + length
        if kind == _FULL:
            out.append(body)
        elif kind == _FIRST:
            pending = bytearray(body)
        elif pending is None:
            raise _Unreadable
        else:
            pending += body
            if kind == _LAST:
                out.append(bytes(pending))
                pending = None
    return out


def _slice(data: bytes, pos: int) -> tuple[bytes, int]:
    n, pos = varint(data, pos)
    if pos + n > len(data):
        raise _Unreadable
    return data[pos:pos + n], pos + n


def _apply(edit: bytes, files: dict[int, TableRange]) -> None:
    pos, n = 0, len(edit)
    cf = 0
    while pos < n:
        tag, pos = varint(edit, pos)
        if tag in (2, 3, 4, 9, 10, 203, 300):
            _, pos = varint(edit, pos)
        elif tag == 1:
            _, pos = _slice(edit, pos)
        elif tag == 200:
            cf, pos = varint(edit, pos)
        elif tag in (201,):
            _, pos = _slice(edit, pos)
        elif tag == 202:
            pass
        elif tag == 5:
            _, pos = varint(edit, pos)
            _, pos = _slice(edit, pos)
        elif tag == 6:
            _, pos = varint(edit, pos)
            number, pos = varint(edit, pos)
            if cf == 0:
                files.pop(number, None)
        elif tag in (7, 100, 102, 103):
            level, pos = varint(edit, pos)
            number, pos = varint(edit, pos)
            if tag == 102:
                _, pos = varint(edit, pos)  # path id
            size, pos = varint(edit, pos)
            smallest, pos = _slice(edit, pos)
            largest, pos = _slice(edit, pos)
            sseq = lseq = -1
            if tag != 7:
                sseq, pos = varint(edit, pos)
                lseq, pos = varint(edit, pos)
            if tag == 103:
                while True:
                    field, pos = varint(edit, pos)
                    if field == 1:  # terminate
                        break
                    if field & (1 << 6):  # a field that may not be ignored, not known here
                        raise _Unreadable
                    _, pos = _slice(edit, pos)
            if len(smallest) < 8 or len(largest) < 8:
                raise _Unreadable
            if cf == 0:
                files[number] = TableRange(number, level, size, smallest[:-8], largest[:-8],
                                           sseq if sseq >= 0 else 0, lseq if lseq >= 0 else (1 << 56) - 1)
        elif tag in (400, 401) or tag & _SAFE_IGNORE:
            _, pos = _slice(edit, pos)
        else:
            raise _Unreadable
        if pos > n:
            raise _Unreadable


def table_ranges(manifest: bytes, tables: dict[int, int]) -> dict[int, TableRange] | None:
    """File number -> its range, for `tables` (file number -> size, Spark's list); None when
    the MANIFEST does not describe exactly those tables or cannot be read."""
    files: dict[int, TableRange] = {}
    try:
        for record in _records(manifest):
            _apply(record, files)
    except (_Unreadable, IndexError, ValueError):
        return None
    if {k: v.size for k, v in files.items()} != tables:
        return None
    return files
