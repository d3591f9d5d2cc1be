"""A RocksDB table's full filter: may the table hold a user key? (False: it does not.)

Spark's RocksDB state store gives every table a bloom filter (`new BloomFilter()` in
`RocksDB.scala`: 10 bits per key, a *full* filter over whole user keys, no prefix extractor).
What RocksDB writes for it depends on the table's format version:

- format version >= 5: FastLocalBloom. The filter's last 5 bytes are `-1 | 0 (sub-kind) |
  num_probes (low 5 bits; block size 64 bytes) | 0 0`; a key's 64-bit hash h (RocksDB's `Hash64`:
  XXPH3, the preview of XXH3 in xxHash 0.7.2, whose output differs from the released XXH3) picks one 64-byte cache line, `((h & 0xffffffff) * lines) >> 32`, and its probes
  are 9-bit positions in it: `p = h >> 32`, then `p >> 23` for each probe with
  `p *= 0x9e3779b9` between them;
- format versions 2-4: the legacy bloom. The last 5 bytes are `num_probes | lines (4, LE)`;
  a key's 32-bit hash h (RocksDB's `Hash(key, 0xbc9f1d34)`) picks line `h % lines`, and
  probe i tests bit `h & 511` of it with `h += (h >> 17) | (h << 15)` between probes.

Anything else in a filter's place (a Ribbon filter `-2`, a partitioned filter, a block-based
filter, a prefix filter) is not read: the table is then searched without its filter, which
costs its index and one data block and never gives a wrong answer. Spark cannot be made to
write those: it sets no filter policy but `BloomFilter()`, and no partitioned filters.
"""

from __future__ import annotations

import struct

_U32 = struct.Struct("<I")
_GOLDEN = 0x9E3779B9
_M32 = 0xFFFFFFFF


class BloomFilter:
    """A parsed full filter; `may_contain(user key)`."""

    def __init__(self, data: bytes, kind: str, probes: int, lines: int) -> None:
        self.data, self.kind, self.probes, self.lines = data, kind, probes, lines

    def may_contain(self, key: bytes) -> bool:
        if self.kind == "fast":
            h = xxph3(key)
            line = (((h & _M32) * self.lines) >> 32) << 6
            p = h >> 32
            data = self.data
            for _ in range(self.probes):
                bit = p >> 23
                if not data[line + (bit >> 3)] & (1 << (bit & 7)):
                    return False
                p = (p * _GOLDEN) & _M32
            return True
        h = legacy_hash(key)
        line = (h % self.lines) << 6
        delta = ((h >> 17) | (h << 15)) & _M32
        data = self.data
        for _ in range(self.probes):
            bit = h & 511
            if not data[line + (bit >> 3)] & (1 << (bit & 7)):
                return False
            h = (h + delta) & _M32
        return True


def parse_full_filter(block: bytes) -> BloomFilter | None:
    """The filter of a `fullfilter.` meta block, or None when it is of a kind not read here
    (then every key may be in the table)."""
    n = len(block)
    if n <= 5:
        return None
    body = n - 5
    marker = block[body]
    if marker == 0xFF:  # newer implementations
        if block[body + 1] != 0:  # not FastLocalBloom
            return None
        meta = block[body + 2]
        probes, log2_block = meta & 31, ((meta >> 5) & 7) + 6
        if not 1 <= probes <= 30 or log2_block != 6 or block[body + 3] or block[body + 4] or body % 64:
            return None
        return BloomFilter(block, "fast", probes, body >> 6)
    probes = marker
    if not 1 <= probes <= 30:
        return None  # 0 and negative: always-true/always-false markers, Ribbon (-2) and the rest
    lines = _U32.unpack_from(block, body + 1)[0]
    if lines == 0 or lines * 64 != body:  # only the 64-byte cache lines RocksDB writes on x86-64
        return None
    return BloomFilter(block, "legacy", probes, lines)


def legacy_hash(key: bytes) -> int:
    """RocksDB's `Hash(data, n, 0xbc9f1d34)` (a Murmur-like hash; tail bytes read signed)."""
    m = 0xC6A4A793
    n = len(key)
    h = (0xBC9F1D34 ^ (n * m)) & _M32
    i = 0
    while i + 4 <= n:
        h = (h + _U32.unpack_from(key, i)[0]) & _M32
        h = (h * m) & _M32
        h ^= h >> 16
        i += 4
    rest = n - i
    if rest:
        def signed(b: int) -> int:
            return b - 256 if b >= 128 else b

        if rest == 3:
            h = (h + ((signed(key[i + 2]) << 16) & _M32)) & _M32
        if rest >= 2:
            h = (h + ((signed(key[i + 1]) << 8) & _M32)) & _M32
        h = (h + (signed(key[i]) & _M32)) & _M32
        h = (h * m) & _M32
        h ^= h >> 24
    return h


# --- XXPH3 (xxHash 0.7.2's XXH3 preview, 64 bits, seed 0), as RocksDB's Hash64 computes it ---

_M64 = (1 << 64) - 1
_P32_1, _P32_2, _P32_3 = 0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D
_P64_1, _P64_2, _P64_3, _P64_4, _P64_5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                                          0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5)
_SECRET = bytes.fromhex(
    "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
    "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c"
    "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
    "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364"
    "eac5ac8334d3ebc3c581a0fffa1363eb170ddd51b7f0da49d316552629d4689e"
    "2b16be587d47a1fc8ff8b8d17ad031ce45cb3a8f95160428afd7fbcabb4b407e")
_U64 = struct.Struct("<Q")


def _r64(b: bytes, i: int) -> int:
    return int(_U64.unpack_from(b, i)[0])


def _fold(a: int, b: int) -> int:
    p = a * b
    return (p & _M64) ^ (p >> 64)


def _avalanche(h: int) -> int:
    h ^= h >> 37
    h = (h * _P64_3) & _M64
    return h ^ (h >> 32)


def _mix16(data: bytes, i: int, s: int) -> int:
    return _fold(_r64(data, i) ^ _r64(_SECRET, s), _r64(data, i + 8) ^ _r64(_SECRET, s + 8))


def xxph3(data: bytes) -> int:
    """RocksDB's `Hash64(data, n)`: what its FastLocalBloom filters hash a key with."""
    n = len(data)
    if n <= 16:
        if n > 8:
            lo = _r64(data, 0) ^ _r64(_SECRET, 0)
            hi = _r64(data, n - 8) ^ _r64(_SECRET, 8)
            return _avalanche((n + lo + hi + _fold(lo, hi)) & _M64)
        if n >= 4:
            v = _U32.unpack_from(data, 0)[0] | (_U32.unpack_from(data, n - 4)[0] << 32)
            keyed = v ^ _r64(_SECRET, 0)
            mix = (n + ((keyed ^ (keyed >> 51)) * _P32_1)) & _M64
            return _avalanche(((mix ^ (mix >> 47)) * _P64_2) & _M64)
        if n:
            combined = data[0] | (data[n >> 1] << 8) | (data[n - 1] << 16) | (n << 24)
            keyed = combined ^ _U32.unpack_from(_SECRET, 0)[0]
            return _avalanche((keyed * _P64_1) & _M64)
        return _fold(_r64(_SECRET, 0), _P64_2)  # RocksDB's own value for the empty string
    acc = (n * _P64_1) & _M64
    if n <= 128:
        if n > 32:
            if n > 64:
                if n > 96:
                    acc += _mix16(data, 48, 96) + _mix16(data, n - 64, 112)
                acc += _mix16(data, 32, 64) + _mix16(data, n - 48, 80)
            acc += _mix16(data, 16, 32) + _mix16(data, n - 32, 48)
        acc += _mix16(data, 0, 0) + _mix16(data, n - 16, 16)
        return _avalanche(acc & _M64)
    if n <= 240:
        for i in range(8):
            acc += _mix16(data, 16 * i, 16 * i)
        acc = _avalanche(acc & _M64)
        for i in range(8, n // 16):
            acc += _mix16(data, 16 * i, 16 * (i - 8) + 3)
        acc += _mix16(data, n - 16, 136 - 17)
        return _avalanche(acc & _M64)
    return _xxph3_long(data)


def _xxph3_long(data: bytes) -> int:
    accs = [_P32_3, _P64_1, _P64_2, _P64_3, _P64_4, _P32_2, _P64_5, _P32_1]
    n = len(data)

    def stripe(at: int, s: int) -> None:
        for i in range(8):
            v = _r64(data, at + 8 * i)
            k = v ^ _r64(_SECRET, s + 8 * i)
            accs[i] = (accs[i] + v + (k & 0xFFFFFFFF) * (k >> 32)) & _M64

    rounds = (len(_SECRET) - 64) // 8
    block = 64 * rounds
    blocks = n // block
    for b in range(blocks):
        for s in range(rounds):
            stripe(b * block + 64 * s, 8 * s)
        for i in range(8):  # scramble
            a = accs[i]
            a ^= a >> 47
            a ^= _r64(_SECRET, len(_SECRET) - 64 + 8 * i)
            accs[i] = (a * _P32_1) & _M64
    for s in range((n - block * blocks) // 64):
        stripe(blocks * block + 64 * s, 8 * s)
    if n & 63:
        stripe(n - 64, len(_SECRET) - 64 - 7)
    out = (n * _P64_1) & _M64
    for i in range(0, 8, 2):
        out += _fold(accs[i] ^ _r64(_SECRET, 11 + 8 * i), accs[i + 1] ^ _r64(_SECRET, 11 + 8 * i + 8))
    return _avalanche(out & _M64)
