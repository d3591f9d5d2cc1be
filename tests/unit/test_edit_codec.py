"""The lz4 an edit writes (engine/lookup/formats/codec.py `compress`) is lz4-java's block
stream: the readers decode it back whole and streamed, with every block's checksum checked,
compressible data compressed and the rest stored raw; other codecs are refused."""

from __future__ import annotations

import io
import os

import pytest

from airflow_provider_streamstate.engine.core.errors import UnsupportedCheckpointError
from airflow_provider_streamstate.engine.lookup.formats.codec import (
    BLOCK_SIZE,
    compress,
    decompress,
    iter_decompressed,
)


@pytest.mark.parametrize("data", [b"", b"x", b"ab" * BLOCK_SIZE, os.urandom(3 * BLOCK_SIZE + 17)],
                         ids=["empty", "one byte", "compressible, two blocks", "random, four blocks"])
def test_what_compress_writes_decompresses_to_the_same_bytes_whole_and_streamed(data: bytes) -> None:
    packed = compress(data, "lz4")
    assert decompress(packed, "lz4", "f") == data
    assert b"".join(iter_decompressed(io.BytesIO(packed).read, "lz4", "f")) == data


def test_compressible_data_is_compressed_and_random_data_is_stored_raw() -> None:
    assert len(compress(b"ab" * BLOCK_SIZE, "lz4")) < BLOCK_SIZE // 4
    random = os.urandom(BLOCK_SIZE)
    assert len(compress(random, "lz4")) == len(random) + 2 * 21
    assert compress(b"", "lz4")[8] & 0xF0 == 0x10  # the end block: raw, length 0


@pytest.mark.parametrize("codec", ["zstd", "snappy", "lzf"])
def test_a_codec_other_than_lz4_is_refused_in_one_line(codec: str) -> None:
    with pytest.raises(UnsupportedCheckpointError, match=f"compressed with {codec} .*; state edits write lz4 only"):
        compress(b"x", codec)
