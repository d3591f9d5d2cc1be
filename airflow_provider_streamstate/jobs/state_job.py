"""A state job as a Spark application: validate, show, export, diff or bisect a snapshot's
state on the cluster spark-submit puts it on (engine/state/submit.py submits it).

    spark-submit [options] state_job.py STORE STREAM JOB_ID

It reads its request from the store (`streams/<stream>/state-jobs/<job>-request.json`),
lays the snapshots it needs out as scratch checkpoints in the store (server-side copies,
read by the executors where they are), answers with engine/state/jobs.py, writes the
result record beside the request (write-once), and removes its scratch copies. A failure
is recorded too, as one line, a hint and whether a retry can help, and the driver exits 1.
The store is opened with the AWS_* environment of a driver started on the submitter's
host, else with the S3A per-bucket confs the submitter gave the application; the
submitter's properties file of secrets (STREAMSTATE_SECRETS_FILE) is deleted at start.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import traceback
from typing import Any

from airflow_provider_streamstate.engine.core.errors import StreamstateError, UsageError
from airflow_provider_streamstate.engine.state.jobs import StateJobRequest, request_key, result_key
from airflow_provider_streamstate.engine.state.reader import StateReader
from airflow_provider_streamstate.engine.state.submit import RESULT_FORMAT
from airflow_provider_streamstate.engine.stores import open_store
from airflow_provider_streamstate.engine.streams.secret_confs import remove_secrets_file

log = logging.getLogger("streamstate.state_job")


def _ran_on(spark: Any) -> dict[str, Any]:
    """Where the job ran: the application and its Spark, the driver's host and Python, and
    where its code came from (the zip the submit shipped in its py-files, or an installed copy)."""
    import airflow_provider_streamstate

    sc = spark.sparkContext
    return {"master": sc.master, "spark": spark.version,
            "deploy_mode": sc.getConf().get("spark.submit.deployMode", "client"),
            "app_id": sc.applicationId, "driver_host": socket.gethostname(), "python": sys.executable,
            "package": os.path.dirname(airflow_provider_streamstate.__file__)}


def _open_store(url: str, spark: Any) -> Any:
    """The store, with the environment of a driver started here (client mode), else with
    what the submitter gave the application to reach it (`SnapshotStore.spark_access`, read
    back from its Spark conf: cluster mode, no secret in the container's environment)."""
    conf = spark.sparkContext.getConf()
    return open_store(url, spark_conf=lambda key: conf.get(key, None))


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print("usage: state_job.py STORE STREAM JOB_ID", file=sys.stderr)
        return 2
    remove_secrets_file()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    _, store_url, stream, job_id = argv
    from pyspark.sql import SparkSession

    from airflow_provider_streamstate.engine.state.jobs import run_state_job

    spark = SparkSession.builder.appName(f"streamstate-state-job-{stream}").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    try:
        store = _open_store(store_url, spark)
        data = store.get_record(request_key(stream, job_id))
    except BaseException:
        spark.stop()
        raise
    if data is None:
        spark.stop()
        print(f"streamstate: no request for state job {job_id} of {stream} in {store_url}", file=sys.stderr)
        return 2
    record: dict[str, Any] = {"format": RESULT_FORMAT, "job_id": job_id}
    code = 0
    try:
        request = StateJobRequest.from_json(data)
        record["ran_on"] = _ran_on(spark)
        with StateReader(store, spark=spark, scratch_in_store=job_id) as reader:
            record["result"] = run_state_job(request, reader)
    except StreamstateError as exc:
        record["error"] = {"message": exc.message, "hint": exc.hint, "usage": isinstance(exc, UsageError),
                           "retryable": exc.retryable}
        code = 1
    except BaseException as exc:  # noqa: BLE001 - recorded as one line; the traceback goes to the log
        traceback.print_exc()
        record["error"] = {"message": f"{type(exc).__name__}: {' '.join(str(exc).split())[:1000]}",
                           "hint": "see the application's driver log", "usage": False, "retryable": True}
        code = 1
    finally:
        try:
            store.put_record(result_key(stream, job_id), json.dumps(record, default=str).encode())
        finally:
            spark.stop()
    log.info("state job %s: %s", job_id, "failed" if code else "done")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
