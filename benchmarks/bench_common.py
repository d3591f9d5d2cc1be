"""What the benchmarks share: where they work, and the synthetic input every one of them reads."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

WORK = REPO / ".bench"
MiB = 1 << 20


def moto_s3(bucket: str) -> tuple[Any, Any, Any]:
    """A moto S3 server on loopback in this process, with `bucket` made: (server, a boto3
    client of it, moto's backend, for building objects without requests). Stop the server."""
    import logging

    import boto3
    from botocore.config import Config
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    client = boto3.client("s3", endpoint_url=f"http://{host}:{port}", region_name="us-east-1",
                          aws_access_key_id="k", aws_secret_access_key="s",
                          config=Config(max_pool_connections=32, s3={"addressing_style": "path"}))
    client.create_bucket(Bucket=bucket)
    return server, client, s3_backends[DEFAULT_ACCOUNT_ID]["aws"]


def start_s3_server(cmd: list[str]) -> tuple[Any, int]:
    """An S3 server process (`cmd`, given its host and port here) on loopback once it answers:
    (the process, its port). Terminate it."""
    import os
    import subprocess
    import time
    import urllib.request

    from dev.stack import free_port

    port = free_port()
    proc = subprocess.Popen([*cmd, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ, "MOTO_ALLOW_NONEXISTENT_REGION": "true"})
    for _ in range(150):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/", timeout=1)
            break
        except OSError:
            time.sleep(0.2)
    return proc, port


def write_results(name: str, results: dict[str, Any]) -> None:
    """Keep a benchmark's figures in .bench/<name>_results.json and print them as a Markdown table."""
    import json

    WORK.mkdir(parents=True, exist_ok=True)
    (WORK / f"{name}_results.json").write_text(json.dumps(results, indent=1))
    print("| measure | value |\n|---|---|")
    for k, v in results.items():
        print(f"| {k} | {v} |")


def state_rules_sql(frame: Any) -> bool:
    """The four rules of the benchmarks' GX suite as one Spark SQL aggregate (the baseline):
    no null key, counts >= 1, maxima >= 0, at least one row."""
    from pyspark.sql import functions as F

    r = frame.agg(
        F.sum(F.col("key_k").isNull().cast("int")).alias("null_keys"),
        F.sum((F.col("value_count") < 1).cast("int")).alias("bad_counts"),
        F.sum((F.col("value_max") < 0).cast("int")).alias("bad_max"),
        F.count("*").alias("rows"),
    ).collect()[0]
    return bool(r.null_keys == 0 and r.bad_counts == 0 and r.bad_max == 0 and r.rows >= 1)


def rate_rows(spark: Any, rows_per_batch: int) -> Any:
    """A streaming DataFrame of `rows_per_batch` rows (`timestamp`, `value`) per micro-batch:
    deterministic batch sizes, unlike the wall-clock `rate` source."""
    return (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows_per_batch)
        .option("numPartitions", 4)
        .load()
    )


@contextmanager
def stack_with_yarn(prefix: str) -> Iterator[tuple[Any, Any, Path]]:
    """The stack and a YARN cluster, up for one benchmark: (stack, yarn, its work directory
    below WORK); both stopped after it, however it ends."""
    import tempfile

    from dev import stack as stack_mod

    WORK.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=prefix, dir=WORK))
    stack = stack_mod.up()
    try:
        yarn = stack_mod.start_yarn_cluster(work / "yarn")
        try:
            yield stack, yarn, work
        finally:
            stack_mod.stop_yarn_cluster(work / "yarn")
    finally:
        stack_mod.down()
