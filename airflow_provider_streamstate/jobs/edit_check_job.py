"""Spark's check of an edit batch (engine/edit/spark_check.py submits it, through the
stream's own Spark): the edited copy read with Spark's state reader at the edit batch.

    spark-submit [options] edit_check_job.py CHECKPOINT [CHECKPOINT ...]

The request is beside the copy (`_streamstate/edit-check-request.json`: the batch, every
operator's stores, the changed keys with their asked values). For every store the job
counts the rows Spark's reader returns at the batch (loading every partition's new file
through Spark's own state store provider), and at the batch before when the request names
it (`base_batch_id`: the submitter compares the difference with the edit's). The changed
keys it is asked about are found in the same read: each key's fields, given in order, made
a struct of the reader's key type, and the store left-joined with them null-safely, counted
and collected in one pass; each found key's value is given as `to_json` writes it, beside
the asked value made and written the same way. The answer goes beside the request
(`_streamstate/edit-check.json`); the submitter compares it with its own reading. Several
copies are answered one after the other in one application, each with the confs it pinned.
Exit 0 when every copy is answered (agreement is the submitter's call), 1 when Spark failed
to read one (its answer says why), 2 when one holds no request, 3 on a Spark without a
state reader (3.5).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from airflow_provider_streamstate.engine.checkpoint.reader import (
    FORMAT_VERSION_CONF,
    PROVIDER_CONF,
    ROCKSDB_PROVIDER,
    CheckpointReader,
)
from airflow_provider_streamstate.engine.edit.spark_check import ANSWER, NO_STATE_READER, REQUEST
from airflow_provider_streamstate.engine.lookup.reading.reach import Reach
from airflow_provider_streamstate.engine.state.spark import CHANGELOG_CONF
from airflow_provider_streamstate.engine.streams.secret_confs import remove_secrets_file


def _reader(spark: Any, checkpoint: str, batch_id: int, op: int, store: str) -> Any:
    r = spark.read.format("statestore").option("batchId", batch_id).option("operatorId", op)
    if store != "default":
        r = r.option("storeName", store)
    return r.load(checkpoint)


def pin_confs(spark: Any, reader: CheckpointReader, batch: int, was: dict[str, str | None]) -> None:
    """The confs the checkpoint pinned (provider, format versions, codec), its checkpoint
    format (Spark reads a format 2 commit log only with it), and changelog replay on for
    RocksDB (the edit batch is a changelog on every RocksDB store). `was` gets each key's
    value before (None: unset) as it is set, for `unpin_confs`."""
    meta, _ = reader.offsets(batch)
    conf = {str(k): str(v) for k, v in (meta.get("conf") or {}).items() if str(k).startswith("spark.sql.streaming.")}
    if conf.get(PROVIDER_CONF) == ROCKSDB_PROVIDER:
        conf[CHANGELOG_CONF] = "true"
    conf[FORMAT_VERSION_CONF] = str(reader.checkpoint_format(batch))
    for key, value in conf.items():
        was.setdefault(key, spark.conf.get(key, None))
        spark.conf.set(key, value)


def unpin_confs(spark: Any, was: dict[str, str | None]) -> None:
    """Every conf `pin_confs` set back to what it was (the application's own settings)."""
    for key, value in was.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)


def _row_literal(values: list[Any], struct: Any) -> Any:
    """A struct column of the reader's type `struct` holding `values` (JSON, in field order:
    names may repeat, a window's grouping expressions do): each top-level field a literal
    cast to its type (binary given as base64, as `to_json` writes it), nested ones parsed with
    `from_json`."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType, StructField, StructType

    cols = []
    for v, f in zip(values, struct.fields, strict=True):
        if isinstance(v, (dict, list)):
            wrapped = StructType([StructField("x", f.dataType)])
            col = F.from_json(F.lit(json.dumps({"x": v})), wrapped)["x"]
        elif isinstance(f.dataType, BinaryType) and v is not None:
            col = F.unbase64(F.lit(v))
        else:
            col = F.lit(v).cast(f.dataType)
        cols.append(col.alias(f.name))
    return F.struct(*cols)


def answer(spark: Any, checkpoint: str, req: dict[str, Any]) -> dict[str, Any]:
    from pyspark.sql import functions as F

    batch = int(req["batch_id"])
    base = req.get("base_batch_id")
    out: dict[str, Any] = {"spark_version": str(spark.version), "entries": {}, "keys": []}
    if base is not None:
        out["base_entries"] = {}
    groups: dict[tuple[int, str], list[tuple[int, dict[str, Any]]]] = {}
    for i, k in enumerate(req["keys"]):
        groups.setdefault((k["operator_id"], k["store"]), []).append((i, k))
    found: dict[int, str | None] = {}
    expected: dict[int, str | None] = {}
    for s in req["stores"]:
        op, store = s["operator_id"], s["store"]
        label = f"{op}/{store}"
        df = _reader(spark, checkpoint, batch, op, store)
        keys = groups.get((op, store), [])
        if not keys:
            out["entries"][label] = df.count()
        else:
            # One read of the store for its count and all its keys: the asked keys as a small
            # table (one array of literal rows, exploded: one plan, not a union of one per key),
            # left-joined (a key matches at most one of them: the count is the store's).
            key_type, value_type = df.schema["key"].dataType, df.schema["value"].dataType
            wanted = spark.range(1).select(F.inline(F.array(*[
                F.struct(F.lit(i).alias("i"), _row_literal(k["key"], key_type).alias("wanted")) for i, k in keys])))
            # Keys Spark holds equal (0.0 and -0.0, say) are one row here: a stored key matches once.
            wanted = wanted.groupBy("wanted").agg(F.collect_list("i").alias("ids"))
            row = df.join(F.broadcast(wanted), df["key"].eqNullSafe(wanted["wanted"]), "left").agg(
                F.count(F.lit(1)).alias("n"),
                F.collect_list(F.when(F.col("ids").isNotNull(),
                                      F.struct(F.col("ids"), F.to_json("value").alias("v")))).alias("hits")).first()
            out["entries"][label] = int(row["n"])
            for hit in row["hits"]:
                for i in hit["ids"]:
                    found[int(i)] = hit["v"]
            asked = [(i, k) for i, k in keys if k["value"] is not None]
            if asked:
                first = spark.range(1).select(*[F.to_json(_row_literal(k["value"], value_type)).alias(f"e{i}")
                                                for i, k in asked]).first()
                expected.update({i: first[f"e{i}"] for i, _ in asked})
        if base is not None:
            out["base_entries"][label] = _reader(spark, checkpoint, int(base), op, store).count()
    for i, k in enumerate(req["keys"]):
        out["keys"].append({"operator_id": k["operator_id"], "store": k["store"], "key": k["key"],
                            "found": i in found, "value": found.get(i), "expected": expected.get(i)})
    return out


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: edit_check_job.py CHECKPOINT [CHECKPOINT ...]", file=sys.stderr)
        return 2
    remove_secrets_file()
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName("streamstate-edit-check").getOrCreate()
    version = str(spark.version)
    if tuple(int(x) for x in version.split(".")[:2]) < (4, 0):
        print(f"streamstate: Spark {version} has no state reader (Spark 4.0 added it)", file=sys.stderr)
        return NO_STATE_READER
    spark.streams.active  # noqa: B018 - PySpark 4.1 loads a RocksDB store offline only after this
    codes = [check(spark, checkpoint) for checkpoint in argv[1:]]
    spark.stop()
    return max(codes)


def check(spark: Any, checkpoint: str) -> int:
    """Answer the request beside one copy (several copies: one after the other, each with
    its own pinned confs): 0 answered, 1 Spark failed to read it, 2 no request there."""
    conf = spark.sparkContext.getConf()
    fs = Reach.from_spark_conf(lambda key: conf.get(key, None), checkpoint).open(checkpoint)
    raw = fs.read_record(REQUEST)
    if raw is None:
        print(f"streamstate: {checkpoint} holds no edit check request", file=sys.stderr)
        return 2
    was: dict[str, str | None] = {}
    try:
        req = json.loads(raw)
        pin_confs(spark, CheckpointReader(fs), int(req["batch_id"]), was)
        out = answer(spark, checkpoint.replace("s3://", "s3a://", 1), req)
        code = 0
    except Exception as exc:  # noqa: BLE001 - Py4J and PySpark errors alike: recorded and reported
        out = {"spark_version": str(spark.version), "error": " ".join(str(exc).split())[:2000]}
        code = 1
    finally:  # the next copy reads with its own confs over the application's, none of this one's
        unpin_confs(spark, was)
    fs.write_record(ANSWER, json.dumps(out).encode())
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
