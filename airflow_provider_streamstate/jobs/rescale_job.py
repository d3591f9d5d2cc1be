"""Spark's offline state repartition of one checkpoint, verified where it ran, as a Spark
application (engine/state/rescale.py submits it, through the stream's own Spark).

    spark-submit [options] rescale_job.py CHECKPOINT PARTITIONS

`spark._streamingCheckpointManager.repartition(CHECKPOINT, PARTITIONS)` (Spark 4.2+) writes
batch N+1 with the state of batch N spread over PARTITIONS partitions. The checkpoint is a
verified copy, never a running stream's. A checkpoint whose newest batch is already a
committed repartition to PARTITIONS (a job run again) is verified, not repartitioned again.

Then, in the same application, the copy is verified by the executors: one Spark task per
operator, store, partition and batch computes that partition's state digest with the
engine's own decoders (engine/lookup/digest_tasks.py: the table reader, changelogs, the row
format, our Murmur3; not Spark's state reader nor the writer the repartition used), reading
the checkpoint's files itself (a local path, S3 with the S3A options of the application's
conf, HDFS through WebHDFS); the driver sums them into the digests of batches N and N+1 and
compares them (`repartition_problems`: the same entries, every key of N+1 in the partition
Spark will look for it in). The executors' Python needs this package, lz4 and xxhash
(docs/deployment.md).

The outcome is recorded beside the checkpoint (`_streamstate/repartition.json`,
`RepartitionRecord`: Spark's version, its error class and message when it failed, the
verification's digests, problems, tasks, executors and timings), best effort: the checkpoint
itself (a committed repartition batch, or not) and the record's digests are what the
submitter checks. Exit 0 when repartitioned and verified, 1 when Spark failed, 3 when this
Spark has no offline repartition, 4 when the repartitioned state did not verify.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import sys
import time
from dataclasses import replace
from typing import Any

from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.checkpoint.repartition import (
    RepartitionRecord,
    Verification,
    repartition_at,
    write_repartition_record,
)
from airflow_provider_streamstate.engine.lookup.digest import combine, repartition_problems
from airflow_provider_streamstate.engine.lookup.digest_tasks import DigestTask, PartitionDigest, plan_digest
from airflow_provider_streamstate.engine.lookup.reading.reach import Reach
from airflow_provider_streamstate.engine.streams.secret_confs import remove_secrets_file

_ERROR_CLASS = re.compile(r"\[([A-Z][A-Z0-9_]+(?:\.[A-Z0-9_]+)*)\]\s*(.*)")
NOT_VERIFIED = 4


def spark_error(exc: BaseException) -> str:
    """Spark's error class and message (`STATE_REPARTITION_INVALID_CHECKPOINT.UNSUPPORTED_PROVIDER:
    ...`) from a Py4J or PySpark exception, one line."""
    text = str(exc)
    for line in text.splitlines():
        m = _ERROR_CLASS.search(line)
        if m:
            return f"{m.group(1)}: {m.group(2).strip()}"[:1000]
    return " ".join(text.split())[:1000]


def _record(fs: Any, record: RepartitionRecord) -> None:
    with contextlib.suppress(Exception):  # best effort: the checkpoint itself says what happened
        write_repartition_record(fs, record)


def _executor() -> str:
    """The executor this Python worker belongs to: its YARN container, else its host and the
    Python daemon its executor started (every worker of one executor is its child)."""
    return os.environ.get("CONTAINER_ID") or f"{socket.gethostname()}:{os.getppid()}"


def _digest_on_executor(task: DigestTask, reach: Reach) -> PartitionDigest:
    from airflow_provider_streamstate.engine.lookup.digest_tasks import digest_on_worker

    return replace(digest_on_worker(task, reach), worker=_executor())


def verify(spark: Any, checkpoint: str, reach: Reach, reader: CheckpointReader, batch_id: int,
           partitions: int) -> Verification:
    """The digests of batch `batch_id - 1` and of the repartition batch `batch_id`, computed by
    the executors (one task per operator, store, partition and batch, largest first)."""
    started = time.monotonic()
    before_plan = plan_digest(checkpoint, batch_id - 1, placement=False, reader=reader)
    after_plan = plan_digest(checkpoint, batch_id, placement=True, reader=reader)
    tasks = sorted([*before_plan.tasks, *after_plan.tasks], key=lambda t: -t.size)
    planned = time.monotonic()
    sc = spark.sparkContext
    sc.setJobDescription(f"streamstate: verify the repartition of {checkpoint} to {partitions} partitions "
                         f"({len(tasks)} state partitions)")
    results: list[PartitionDigest] = (sc.parallelize(tasks, len(tasks))
                                      .map(lambda t: _digest_on_executor(t, reach)).collect())
    digested = time.monotonic()
    before = combine(before_plan, [r for r in results if r.batch_id == before_plan.batch_id])
    after = combine(after_plan, [r for r in results if r.batch_id == after_plan.batch_id])
    return Verification(tuple(repartition_problems(before, after, partitions)), before.to_json(), after.to_json(),
                        len(tasks), len({r.worker for r in results}),
                        {"plan": planned - started, "digests": digested - planned,
                         "task_total": sum(r.seconds for r in results),
                         "task_cpu": sum(r.cpu_seconds for r in results), "total": time.monotonic() - started})


def main(argv: list[str]) -> int:
    if len(argv) != 3 or not argv[2].isdigit():
        print("usage: rescale_job.py CHECKPOINT PARTITIONS", file=sys.stderr)
        return 2
    remove_secrets_file()
    from pyspark.sql import SparkSession

    checkpoint, partitions = argv[1], int(argv[2])
    spark = SparkSession.builder.appName(f"streamstate-rescale-{partitions}").getOrCreate()
    version = str(spark.version)
    conf = spark.sparkContext.getConf()
    reach = Reach.from_spark_conf(lambda key: conf.get(key, None), checkpoint)
    fs = reach.open(checkpoint)
    manager = getattr(spark, "_streamingCheckpointManager", None)
    if manager is None:
        message = f"Spark {version} has no offline state repartition (Spark 4.2 added it)"
        _record(fs, RepartitionRecord(False, version, error=message, unsupported=True))
        print(f"streamstate: {message}", file=sys.stderr)
        return 3
    reader = CheckpointReader(fs)
    newest = reader.resolve_batch(None)
    done = repartition_at(reader, newest)
    seconds = None
    if done is None or not done.committed or done.to_partitions != partitions:
        started = time.monotonic()
        try:
            manager.repartition(checkpoint.replace("s3://", "s3a://", 1), partitions, True)
        except Exception as exc:  # noqa: BLE001 - Py4J and PySpark errors alike: recorded and reported
            error = spark_error(exc)
            _record(fs, RepartitionRecord(False, version, error=error))
            print(f"streamstate: the repartition failed: {error}", file=sys.stderr)
            return 1
        seconds = round(time.monotonic() - started, 3)
        fs.refresh()
        newest = reader.resolve_batch(None)
    try:
        verification = verify(spark, checkpoint, reach, reader, newest, partitions)
    except Exception as exc:  # noqa: BLE001 - an executor without this package, a checkpoint it cannot reach
        verification = Verification((f"the verification could not run: {spark_error(exc)}",), None, None, 0, 0)
    _record(fs, RepartitionRecord(True, version, partitions, newest, seconds, verification=verification))
    if not verification.ok:
        problems = verification.problems
        print(f"streamstate: the repartitioned state did not verify: {problems[0]}"
              + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""), file=sys.stderr)
        return NOT_VERIFIED
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
