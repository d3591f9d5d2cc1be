"""State files written byte by byte as Spark's writers lay them out (lz4-java's block stream,
the HDFS-backed store's records, state schema files), and a small HDFS-backed aggregation
checkpoint built from them: real enough for key lookups, without Spark."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from airflow_provider_streamstate.engine.lookup.encodings.murmur3 import partition_of
from airflow_provider_streamstate.engine.lookup.encodings.types import atomic
from airflow_provider_streamstate.engine.lookup.encodings.types import struct as struct_type
from airflow_provider_streamstate.engine.lookup.encodings.unsafe_row import encode_row
from tests.unit.fake_checkpoint import make_checkpoint, write

STRICT = {"spark.sql.streaming.statefulOperator.useStrictDistribution": "true"}
KEY = struct_type(("k", atomic("string")))
VALUE = struct_type(("n", atomic("long")))


def lz4_stream(data: bytes, block: int = 64, raw_every: int = 3) -> bytes:
    """lz4-java's LZ4BlockOutputStream framing of `data` (what Spark's lz4 codec writes)."""
    import lz4.block
    import xxhash

    out = bytearray()
    for n, i in enumerate(range(0, len(data), block)):
        chunk = data[i:i + block]
        packed = lz4.block.compress(chunk, store_size=False)
        method, body = (0x10, chunk) if n % raw_every == 2 else (0x20, packed)
        check = xxhash.xxh32_intdigest(chunk, 0x9747B28C) & 0x0FFFFFFF
        out += b"LZ4Block" + struct.pack("<BiiI", method | 5, len(body), len(chunk), check) + body
    out += b"LZ4Block" + struct.pack("<BiiI", 0x10 | 5, 0, 0, 0)
    return bytes(out)


def records(*items: tuple[bytes, bytes | None]) -> bytes:
    """Delta/snapshot records (DataOutputStream, big-endian), then the end marker."""
    out = bytearray()
    for k, v in items:
        out += struct.pack(">i", len(k)) + k
        out += struct.pack(">i", -1) if v is None else struct.pack(">i", len(v)) + v
    return bytes(out + struct.pack(">i", -1))


def utf(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">H", len(b)) + b


def schema_v2(key_json: dict, value_json: dict) -> bytes:
    return utf("v2") + struct.pack(">i", 1) + utf(json.dumps(key_json)) + struct.pack(">i", 1) + utf(json.dumps(value_json))


def field_json(name: str, t: str) -> dict:
    return {"type": "struct", "fields": [{"name": name, "type": t, "nullable": True, "metadata": {}}]}


class Aggregation:
    """An HDFS-backed checkpoint of a count per string key `k` (value `n`), `partitions`
    partitions, committed batch by batch with `commit`: every partition gets a delta each
    batch, as Spark's tasks write one (empty when nothing changed)."""

    def __init__(self, root: Path, partitions: int = 3) -> None:
        self.root, self.partitions = root, partitions
        make_checkpoint(root, batches=1, partitions=partitions, conf=STRICT)
        write(root / "state/0/0/_metadata/schema", schema_v2(field_json("k", "string"), field_json("n", "long")))
        self.batch = -1

    def partition(self, key: str) -> int:
        return partition_of([key], [KEY.fields[0].type], self.partitions)

    def commit(self, changes: dict[str, int | None]) -> int:
        """One more batch: `changes` puts (or with None, removes) keys. Its batch id."""
        self.batch += 1
        b = self.batch
        if b > 0:
            meta = {"batchWatermarkMs": 0, "batchTimestampMs": 5000 + b,
                    "conf": json.loads((self.root / "offsets/0").read_text().split("\n")[1])["conf"]}
            write(self.root / f"offsets/{b}", f"v1\n{json.dumps(meta)}\n" + json.dumps({"tx": {"0": 10 * (b + 1)}}))
            write(self.root / f"commits/{b}", "v1\n" + json.dumps({"nextBatchWatermarkMs": 0}))
        by_partition: dict[int, list[tuple[bytes, bytes | None]]] = {p: [] for p in range(self.partitions)}
        for k, n in changes.items():
            by_partition[self.partition(k)].append(
                (encode_row([k], KEY), None if n is None else encode_row([n], VALUE)))
        for p, recs in by_partition.items():
            write(self.root / f"state/0/{p}/{b + 1}.delta", lz4_stream(records(*recs)))
        return b
