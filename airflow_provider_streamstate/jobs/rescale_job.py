"""Spark's offline state repartition of one checkpoint, as a Spark application
(engine/state/rescale.py submits it, through the stream's own Spark).

    spark-submit [options] rescale_job.py CHECKPOINT PARTITIONS

`spark._streamingCheckpointManager.repartition(CHECKPOINT, PARTITIONS)` (Spark 4.2+) writes
batch N+1 with the state of batch N spread over PARTITIONS partitions. The checkpoint is a
verified copy, never a running stream's. The outcome is recorded beside it
(`_streamstate/repartition.json`: Spark's version, and its error class and message when it
failed), best effort: the checkpoint itself (a committed repartition batch, or not) is what
the submitter trusts. Exit 0 on success, 1 when Spark failed, 3 when this Spark has no
offline repartition.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
from typing import Any

from airflow_provider_streamstate.engine.checkpoint.repartition import REPARTITION_FORMAT, REPARTITION_RECORD
from airflow_provider_streamstate.engine.checkpoint.sidecar import open_sidecar
from airflow_provider_streamstate.engine.streams.secret_confs import ENV_SECRETS_FILE

_ERROR_CLASS = re.compile(r"\[([A-Z][A-Z0-9_]+(?:\.[A-Z0-9_]+)*)\]\s*(.*)")


def spark_error(exc: BaseException) -> str:
    """Spark's error class and message (`STATE_REPARTITION_INVALID_CHECKPOINT.UNSUPPORTED_PROVIDER:
    ...`) from a Py4J or PySpark exception, one line."""
    text = str(exc)
    for line in text.splitlines():
        m = _ERROR_CLASS.search(line)
        if m:
            return f"{m.group(1)}: {m.group(2).strip()}"[:1000]
    return " ".join(text.split())[:1000]


def _record(checkpoint: str, result: dict[str, Any]) -> None:
    with contextlib.suppress(Exception):  # best effort: the checkpoint itself says what happened
        open_sidecar(checkpoint).write(REPARTITION_RECORD, json.dumps({"format": REPARTITION_FORMAT, **result}).encode())


def main(argv: list[str]) -> int:
    if len(argv) != 3 or not argv[2].isdigit():
        print("usage: rescale_job.py CHECKPOINT PARTITIONS", file=sys.stderr)
        return 2
    secrets_file = os.environ.pop(ENV_SECRETS_FILE, None)
    if secrets_file:  # spark-submit has read it
        with contextlib.suppress(OSError):
            os.unlink(secrets_file)
    from pyspark.sql import SparkSession

    checkpoint, partitions = argv[1], int(argv[2])
    spark = SparkSession.builder.appName(f"streamstate-rescale-{partitions}").getOrCreate()
    version = str(spark.version)
    manager = getattr(spark, "_streamingCheckpointManager", None)
    if manager is None:
        message = f"Spark {version} has no offline state repartition (Spark 4.2 added it)"
        _record(checkpoint, {"ok": False, "spark_version": version, "error": message, "unsupported": True})
        print(f"streamstate: {message}", file=sys.stderr)
        return 3
    started = time.monotonic()
    try:
        manager.repartition(checkpoint.replace("s3://", "s3a://", 1), partitions, True)
    except Exception as exc:  # noqa: BLE001 - Py4J and PySpark errors alike: recorded and reported
        error = spark_error(exc)
        _record(checkpoint, {"ok": False, "spark_version": version, "error": error})
        print(f"streamstate: the repartition failed: {error}", file=sys.stderr)
        return 1
    _record(checkpoint, {"ok": True, "spark_version": version, "partitions": partitions,
                         "seconds": round(time.monotonic() - started, 3)})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
