"""The HDFS-backed state store's files: one partition's state at a version, as key bytes
-> value bytes.

Version V of a store is the newest `<s>.snapshot` with s <= V (or nothing) with every
`<v>.delta`, s < v <= V, applied in order (`HDFSBackedStateStoreProvider.loadMap`). Both
are the codec's stream (`codec`) of records, all integers big-endian
(`DataOutputStream`):

    key size (4) | key (UnsafeRow) | value size (4) | value (UnsafeRow)
    key size (4) | key | -1                  a removal (deltas only)
    -1                                       end of file

A key removed by a later delta is absent; a later put replaces the value.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from airflow_provider_streamstate.engine.core.errors import CorruptionError
from airflow_provider_streamstate.engine.lookup.formats.codec import decompress

_INT = struct.Struct(">i")


def apply_records(state: dict[bytes, bytes], data: bytes, where: str, *, removals: bool) -> None:
    """Apply one decompressed delta or snapshot to `state`."""
    pos, n = 0, len(data)
    unpack = _INT.unpack_from
    while True:
        if pos + 4 > n:
            raise CorruptionError(f"{where} is truncated: its records end without the end marker",
                                  hint="restore an older snapshot, or re-read the checkpoint")
        (ksize,) = unpack(data, pos)
        pos += 4
        if ksize == -1:
            if pos != n:
                raise CorruptionError(f"{where} has {n - pos} bytes after its end marker")
            return
        if ksize < 0 or pos + ksize + 4 > n:
            raise CorruptionError(f"{where} is damaged: a key of {ksize} bytes at byte {pos - 4}",
                                  hint="restore an older snapshot, or re-read the checkpoint")
        key = data[pos:pos + ksize]
        pos += ksize
        (vsize,) = unpack(data, pos)
        pos += 4
        if vsize < 0:
            if not removals:
                raise CorruptionError(f"{where} is damaged: a snapshot file holds a removal")
            state.pop(key, None)
            continue
        if pos + vsize > n:
            raise CorruptionError(f"{where} is truncated: a value of {vsize} bytes runs past its end",
                                  hint="restore an older snapshot, or re-read the checkpoint")
        state[key] = data[pos:pos + vsize]
        pos += vsize


def iter_records(chunks: Iterator[bytes], where: str, *, removals: bool) -> Iterator[tuple[bytes, bytes | None]]:
    """The records of one delta or snapshot as (key, value, None for a removal), from its
    decompressed bytes chunk by chunk: the caller may stop at any record."""
    buf = bytearray()
    pos = 0
    unpack = _INT.unpack_from
    ended = False
    for chunk in chunks:
        if ended:
            if chunk:
                raise CorruptionError(f"{where} has bytes after its end marker")
            continue
        if pos:
            del buf[:pos]
            pos = 0
        buf += chunk
        n = len(buf)
        while pos + 4 <= n:
            (ksize,) = unpack(buf, pos)
            if ksize == -1:
                if pos + 4 != n:
                    raise CorruptionError(f"{where} has {n - pos - 4} bytes after its end marker")
                ended = True
                pos += 4
                break
            if ksize < 0:
                raise CorruptionError(f"{where} is damaged: a key of {ksize} bytes",
                                      hint="restore an older snapshot, or re-read the checkpoint")
            if pos + 8 + ksize > n:
                break
            (vsize,) = unpack(buf, pos + 4 + ksize)
            if vsize < 0:
                if not removals:
                    raise CorruptionError(f"{where} is damaged: a snapshot file holds a removal")
                yield bytes(buf[pos + 4:pos + 4 + ksize]), None
                pos += 8 + ksize
                continue
            end = pos + 8 + ksize + vsize
            if end > n:
                break
            yield bytes(buf[pos + 4:pos + 4 + ksize]), bytes(buf[pos + 8 + ksize:end])
            pos = end
    if not ended:
        raise CorruptionError(f"{where} is truncated: its records end without the end marker",
                              hint="restore an older snapshot, or re-read the checkpoint")


def load_partition(files: list[tuple[str, bytes]], codec: str) -> dict[bytes, bytes]:
    """`files`: (name, raw bytes) of a store partition's snapshot (if any) then its deltas,
    in version order. Returns the state as a dict of key bytes to value bytes."""
    state: dict[bytes, bytes] = {}
    for name, raw in files:
        snapshot = name.endswith(".snapshot")
        apply_records(state, decompress(raw, codec, name), name, removals=not snapshot)
    return state
