"""Spark's compression codec framing of state files (`.delta`, `.snapshot`, `.changelog`).

The HDFS-backed store's files and RocksDB's changelogs go through
`CompressionCodec.createCodec(spark.sql.streaming.stateStore.compression.codec)`, pinned
in the offset log at batch 0 (default `lz4`). Spark's `lz4` codec is lz4-java's
`LZ4BlockOutputStream`, a sequence of blocks, each

    "LZ4Block" | token (1) | compressed length (4, LE) | original length (4, LE)
    | checksum (4, LE) | data

where token = method (0x10 raw, 0x20 LZ4) | level, and checksum is the XXHash32 (seed
0x9747b28c) of the original bytes masked to 28 bits. A block of length 0 ends the stream.
We verify every block's checksum, so a corrupted file fails with its name instead of
decoding garbage. `zstd` (standard zstd frames) is read when the `zstandard` package is
installed; snappy and lzf are refused by name. `compress` writes lz4 as lz4-java does
(what a state edit writes, engine/edit/).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator

from airflow_provider_streamstate.engine.core.errors import CorruptionError, UnsupportedCheckpointError

CODEC_CONF = "spark.sql.streaming.stateStore.compression.codec"
_MAGIC = b"LZ4Block"
_HEADER = struct.Struct("<BiiI")  # token, compressed length, original length, checksum
_SEED = 0x9747B28C
_RAW, _LZ4 = 0x10, 0x20
# Spark's spark.io.compression.lz4.blockSize default (32 KiB): lz4-java's reader takes a block of
# at most 2^(10 + level) bytes, the level being the token's low 4 bits.
BLOCK_SIZE = 32 << 10
_LEVEL = BLOCK_SIZE.bit_length() - 1 - 10
_CODEC_ALIASES = {
    "org.apache.spark.io.lz4compressioncodec": "lz4",
    "org.apache.spark.io.zstdcompressioncodec": "zstd",
    "org.apache.spark.io.snappycompressioncodec": "snappy",
    "org.apache.spark.io.lzfcompressioncodec": "lzf",
}


def codec_name(conf: dict[str, str]) -> str:
    """The state store codec a checkpoint pinned (`lz4` when it pinned none)."""
    raw = (conf.get(CODEC_CONF) or "lz4").strip()
    return _CODEC_ALIASES.get(raw.lower(), raw.lower())


def check_codec(name: str) -> None:
    if name == "lz4":
        return
    if name == "zstd":
        try:
            import zstandard  # noqa: F401
        except ImportError:
            raise UnsupportedCheckpointError(
                "state files are compressed with zstd and the `zstandard` package is not installed",
                hint="install zstandard, or read this state with Spark (`streamstate state`)",
            ) from None
        return
    raise UnsupportedCheckpointError(
        f"state files are compressed with the {name} codec ({CODEC_CONF}); key lookups read lz4 and zstd",
        hint="read this state with Spark (`streamstate state`)",
    )


def decompress(data: bytes, name: str, where: str) -> bytes:
    """A whole state file's decompressed bytes; CorruptionError naming `where` when the
    framing, a length or a checksum is wrong (a truncated or damaged file)."""
    check_codec(name)
    if name == "zstd":
        import zstandard

        try:
            return zstandard.ZstdDecompressor().decompressobj().decompress(data)
        except zstandard.ZstdError as exc:
            raise CorruptionError(f"{where} is not a valid zstd stream: {exc}") from None
    return lz4_block_stream(data, where)


def iter_decompressed(read: Callable[[int], bytes], name: str, where: str) -> Iterator[bytes]:
    """A state file's decompressed bytes chunk by chunk, `read(n)` giving its raw bytes as
    they come: an lz4 stream block by block (each block's checksum checked before it is
    given), a zstd stream 1 MiB at a time. The caller may stop at any chunk."""
    check_codec(name)
    if name == "zstd":
        import zstandard

        d = zstandard.ZstdDecompressor().decompressobj()
        while True:
            raw = read(1 << 20)
            if not raw:
                if not d.eof:
                    raise CorruptionError(f"{where} is truncated: its zstd stream does not end",
                                          hint="restore an older snapshot, or re-read the checkpoint")
                return
            try:
                out = d.decompress(raw)
            except zstandard.ZstdError as exc:
                raise CorruptionError(f"{where} is not a valid zstd stream: {exc}") from None
            if out:
                yield out

    at = 0
    while True:
        head = _read_exactly(read, 21)
        if len(head) < 21:
            raise CorruptionError(f"{where} is truncated: its LZ4 stream ends without an end block at byte {at}",
                                  hint="the file is damaged; restore an older snapshot or re-read the checkpoint")
        if head[:8] != _MAGIC:
            raise CorruptionError(f"{where} is damaged: no LZ4 block header at byte {at}",
                                  hint="check the state store codec; restore an older snapshot if the file is damaged")
        token, clen, olen, check = _HEADER.unpack_from(head, 8)
        method = token & 0xF0
        if clen < 0 or olen < 0 or method not in (_RAW, _LZ4):
            raise CorruptionError(f"{where} is damaged or truncated: an LZ4 block of {clen} bytes at byte {at}",
                                  hint="restore an older snapshot, or re-read the checkpoint")
        if olen == 0:
            return
        raw = _read_exactly(read, clen)
        if len(raw) != clen:
            raise CorruptionError(f"{where} is damaged or truncated: an LZ4 block of {clen} bytes at byte {at}",
                                  hint="restore an older snapshot, or re-read the checkpoint")
        at += 21 + clen
        yield _lz4_block(raw, method, olen, check, where)


def _lz4_block(raw: bytes, method: int, olen: int, check: int, where: str) -> bytes:
    """One block of lz4-java's block stream, decompressed (or stored raw) and checked
    against its XXHash32."""
    import lz4.block
    import xxhash

    if method == _LZ4:
        try:
            raw = lz4.block.decompress(raw, uncompressed_size=olen)
        except lz4.block.LZ4BlockError as exc:
            raise CorruptionError(f"{where} is damaged: an LZ4 block does not decompress ({exc})") from None
    if len(raw) != olen or (xxhash.xxh32_intdigest(raw, _SEED) & 0x0FFFFFFF) != check:
        raise CorruptionError(f"{where} is damaged: an LZ4 block's checksum does not match",
                              hint="restore an older snapshot, or re-read the checkpoint")
    return raw


def verified_per_block(name: str) -> bool:
    """Whether a stream of this codec checks each block it gives (lz4-java's XXHash32): one
    that is left early has still been verified as far as it was read."""
    return name == "lz4"


def _read_exactly(read: Callable[[int], bytes], n: int) -> bytes:
    out = read(n)
    while len(out) < n:
        more = read(n - len(out))
        if not more:
            break
        out += more
    return out


def lz4_block_stream(data: bytes, where: str) -> bytes:
    out: list[bytes] = []
    pos, n = 0, len(data)
    while True:
        if pos + 21 > n:
            raise CorruptionError(f"{where} is truncated: its LZ4 stream ends without an end block at byte {pos}",
                                  hint="the file is damaged; restore an older snapshot or re-read the checkpoint")
        if data[pos:pos + 8] != _MAGIC:
            raise CorruptionError(f"{where} is damaged: no LZ4 block header at byte {pos}",
                                  hint="check the state store codec; restore an older snapshot if the file is damaged")
        token, clen, olen, check = _HEADER.unpack_from(data, pos + 8)
        pos += 21
        method = token & 0xF0
        if clen < 0 or olen < 0 or pos + clen > n or method not in (_RAW, _LZ4):
            raise CorruptionError(f"{where} is damaged or truncated: an LZ4 block of {clen} bytes at byte {pos - 21}",
                                  hint="restore an older snapshot, or re-read the checkpoint")
        if olen == 0:
            return b"".join(out)
        out.append(_lz4_block(data[pos:pos + clen], method, olen, check, where))
        pos += clen


def compress(data: bytes, name: str) -> bytes:
    """`data` as Spark's codec `name` writes a state file: lz4-java's `LZ4BlockOutputStream`
    (blocks of BLOCK_SIZE, each LZ4-compressed, or stored raw when that is not smaller, with
    its XXHash32, then the empty end block). Only lz4 is written; any other codec is refused."""
    if name != "lz4":
        raise UnsupportedCheckpointError(
            f"state files are compressed with {name} ({CODEC_CONF}); state edits write lz4 only",
            hint="edit this state through Spark, or run the stream with the lz4 codec (the default)")
    import lz4.block
    import xxhash

    out = bytearray()
    for pos in range(0, len(data), BLOCK_SIZE):
        block = data[pos:pos + BLOCK_SIZE]
        check = xxhash.xxh32_intdigest(block, _SEED) & 0x0FFFFFFF
        packed = lz4.block.compress(block, store_size=False)
        method, body = (_LZ4, packed) if len(packed) < len(block) else (_RAW, block)
        out += _MAGIC + _HEADER.pack(method | _LEVEL, len(body), len(block), check) + body
    out += _MAGIC + _HEADER.pack(_RAW | _LEVEL, 0, 0, 0)
    return bytes(out)
