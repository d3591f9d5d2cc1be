"""The vectors the unit tests of Murmur3 and the UnsafeRow codec check against
(tests/unit/lookup_vectors.json) are Spark's own: each row's bytes as Spark's
UnsafeProjection writes them, `hash()` of each column and of all of them, and the
`pmod(hash, n)` that places a key in one of n partitions. Regenerate them with
STREAMSTATE_REGENERATE_VECTORS=1."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from tests.lookup_cases import TYPED_SCHEMA_JSON, VECTORS, load_vectors, typed_rows

pytestmark = pytest.mark.integration

PARTITIONS = (1, 2, 5, 8, 200)


def spark_vectors(spark: Any) -> dict[str, Any]:
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    spark.conf.set("spark.sql.legacy.allowHashOnMapType", "true")  # maps are never keys; hash them anyway
    schema = StructType.fromJson(TYPED_SCHEMA_JSON)
    rows = typed_rows()
    df = spark.createDataFrame(rows, schema).select(*[F.col(f"`{f.name}`") for f in schema.fields])
    raw = [bytes(r.getBytes()) for r in df._jdf.queryExecution().executedPlan().executeCollect()]  # noqa: SLF001
    cols = [f"`{f.name}`" for f in schema.fields]
    hashes = df.select(F.hash(*cols).alias("all"), *[F.hash(c).alias(f"h_{i}") for i, c in enumerate(cols)],
                       *[F.expr(f"pmod(hash({', '.join(cols)}), {n})").alias(f"p_{n}") for n in PARTITIONS]).collect()
    out = []
    for i, (b, h) in enumerate(zip(raw, hashes, strict=True)):
        out.append({"row": i, "unsafe_row": b.hex(), "hash_all": h["all"],
                    "hash_columns": [h[f"h_{j}"] for j in range(len(cols))],
                    "pmod": {str(n): h[f"p_{n}"] for n in PARTITIONS}})
    return {"spark": spark.version, "rows": out}


def test_the_unit_vectors_are_sparks_own(spark) -> None:  # noqa: ANN001
    fresh = spark_vectors(spark)
    if os.environ.get("STREAMSTATE_REGENERATE_VECTORS") == "1":
        VECTORS.write_text(json.dumps(fresh, indent=1) + "\n")
    stored = load_vectors()
    assert fresh["rows"] == stored["rows"]
