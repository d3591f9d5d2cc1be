"""Golden checkpoints (tests/golden/spark-<line>/<case>/, written by `make golden`, i.e.
dev/golden.py): a checkpoint real Spark wrote, and beside it `golden.json` with the Spark
version and the query that wrote it and what Spark's own state reader returned on it. The
readers' tests (key lookups, a key's history, digests, schemas) read them without Spark.

The reader's rows are kept as collected (timestamps as aware UTC) in JSON with tags for what
JSON lacks (tuples for structs, decimals, bytes, dates, maps), with the reader's schema; read
back, they are given in the comparable form of tests/lookup_cases.py (`spark_norm`: structs
as tuples, timestamps as UTC naive, NaN as a string) and a key also as a lookup takes it
(`to_input`).

Tests import helpers from here, never from conftest.py (see tests/s3.py)."""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

GOLDEN = Path(__file__).resolve().parent / "golden"
MAIN_LINE = "4.1"  # dev/spark_versions.py's main line: the Spark the engine's own jobs run


def encode(value: Any) -> Any:
    """A comparable value (or a lookup's input) as JSON, tagging what JSON has no type for."""
    if value is None or isinstance(value, (bool, int, str, float)):
        return value
    if isinstance(value, decimal.Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, (bytes, bytearray)):
        return {"$bytes": bytes(value).hex()}
    if isinstance(value, dt.datetime):
        return {"$datetime": value.isoformat()}
    if isinstance(value, dt.date):
        return {"$date": value.isoformat()}
    if isinstance(value, tuple):
        return {"$tuple": [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {"$map": [[encode(k), encode(v)] for k, v in value.items()]}
    raise TypeError(f"no golden encoding for {type(value).__name__}: {value!r}")


def decode(value: Any) -> Any:
    """The inverse of `encode`."""
    if isinstance(value, list):
        return [decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    ((tag, body),) = value.items()
    if tag == "$decimal":
        return decimal.Decimal(body)
    if tag == "$bytes":
        return bytes.fromhex(body)
    if tag == "$datetime":
        return dt.datetime.fromisoformat(body)
    if tag == "$date":
        return dt.date.fromisoformat(body)
    if tag == "$tuple":
        return tuple(decode(v) for v in body)
    if tag == "$map":
        return {decode(k): decode(v) for k, v in body}
    raise ValueError(f"unknown golden tag {tag}")


@dataclass(frozen=True)
class Golden:
    """One golden case of one Spark line: its checkpoint and what was recorded with it."""

    line: str
    case: str
    path: Path

    @property
    def checkpoint(self) -> str:
        return str(self.path / "checkpoint")

    @functools.cached_property
    def record(self) -> dict[str, Any]:
        return dict(json.loads((self.path / "golden.json").read_text()))

    @property
    def last_batch(self) -> int:
        return int(self.record["last_batch"])

    def state(self, **options: Any) -> SimpleNamespace:
        """What Spark's state reader returned with these options (`batchId` None: the last
        committed batch): `rows`, each with `partition_id`, `key` (comparable), `key_input`
        (the key as a lookup takes it) and its other columns (comparable); `types`, each
        column's Spark type."""
        from pyspark.sql.types import StructType

        from tests.lookup_cases import spark_norm, to_input

        want = {k: (int(v) if k == "batchId" else str(v)) for k, v in options.items() if v is not None}
        want.setdefault("batchId", self.last_batch)
        for reader in self.record["readers"]:
            if reader["options"] != want:
                continue
            schema = StructType.fromJson(reader["schema"])
            rows = []
            for raw in reader["rows"]:
                values = [decode(v) for v in raw]
                row = {f.name: v if f.name == "partition_id" else spark_norm(v, f.dataType)
                       for v, f in zip(values, schema.fields, strict=True)}
                row["key_input"] = to_input(values[schema.names.index("key")], schema["key"].dataType)
                rows.append(SimpleNamespace(**row))
            return SimpleNamespace(rows=rows, types={f.name: f.dataType for f in schema.fields})
        raise KeyError(f"golden {self.line}/{self.case} has no reader output for {want}: add it to the case's "
                       "readers in dev/golden_cases.py and run `make golden`")

    def copy_to(self, target: Path) -> str:
        """A copy of the checkpoint to damage or write into (the golden stays as it is)."""
        shutil.copytree(self.checkpoint, target)
        return str(target)


# What the engine's readers refuse in one line on a golden (docs/state.md), by (line, case):
# Spark 3.5 writes no operator metadata (a join is an operator like any other to the engine;
# its RocksDB tables' snappy blocks are read, as every compression is); Spark 4.0 writes some
# of its RocksDB zips with checkpoint metadata v2 (these cases' zips).
V2_ZIP = "has RocksDB metadata version 'v2'"
REFUSED = {
    ("4.0", "apply_in_pandas_with_state_rocksdb_changelog"): V2_ZIP,
    ("4.0", "dedup_within_watermark_rocksdb"): V2_ZIP,
    ("4.0", "join_rocksdb"): V2_ZIP,
    ("4.0", "transform_with_state_rocksdb_changelog"): V2_ZIP,
    ("4.0", "typed_dedup_rocksdb_changelog"): V2_ZIP,
    ("4.0", "typed_values_rocksdb_changelog"): V2_ZIP,
    ("3.5", "join_hdfs"): "is not a stream-stream join",
    ("3.5", "join_rocksdb"): "is not a stream-stream join",
}


def refused(g: Golden) -> str | None:
    """Words of the one-line refusal of a lookup of the golden's last batch, or None."""
    return REFUSED.get((g.line, g.case))


def golden(case: str, line: str = MAIN_LINE) -> Golden:
    """A golden case of a Spark line; a test on a line whose goldens were not generated here
    (no `make golden`) fails saying how to make them."""
    import pytest  # here: the generator imports this module in Spark lines' venvs, without pytest

    path = GOLDEN / f"spark-{line}" / case
    if not (path / "golden.json").is_file():
        pytest.fail(f"no golden checkpoint {case} for Spark {line} in {GOLDEN}: run `make golden`")
    return Golden(line, case, path)


def goldens(case: str, *, readable: bool = True) -> list[Golden]:
    """The case on every Spark line it was generated for, the main line first; with
    `readable`, only where the engine's readers do not refuse it (`refused`)."""
    lines = sorted((p.parent.parent.name.removeprefix("spark-") for p in GOLDEN.glob(f"spark-*/{case}/golden.json")),
                   key=lambda line: (line != MAIN_LINE, line))
    found = [golden(case, line) for line in lines]
    return [g for g in found if not (readable and refused(g))]
