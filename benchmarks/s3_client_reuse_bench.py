"""What a stream's driver spends beside an S3 checkpoint: one heartbeat write and one
stop-request read per round (what the supervised wrapper does every 2 s), each through the
checkpoint's location as the driver gives it, against the stack's S3 server. This process's
CPU with the S3 clients kept per process (as shipped) and with a new boto3 session and client
per call (the cache bounded to nothing: how it was before), alternately, in the same run.

    .venv/bin/python benchmarks/s3_client_reuse_bench.py [--rounds 50] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def rounds_cpu(location: str, rounds: int, keep_clients: bool) -> float:
    """CPU seconds of `rounds` x (heartbeat write, stop-request read) on `location`."""
    from airflow_provider_streamstate.backends.s3 import clients
    from airflow_provider_streamstate.engine.checkpoint import sidecar
    from airflow_provider_streamstate.engine.checkpoint.liveness import Heartbeat, now_iso, write_heartbeat
    from airflow_provider_streamstate.engine.streams.records import stop_requested

    clients._clients.clear()
    clients._sessions.clear()
    sidecar._BY_LOCATION.clear()
    saved = clients._MAX_CACHED_CLIENTS
    clients._MAX_CACHED_CLIENTS = saved if keep_clients else 0
    try:
        since = datetime.now(UTC)
        start = time.process_time()
        for batch in range(rounds):
            beat = Heartbeat(query_id="q", run_id="r", query_name="orders", host="bench", pid=os.getpid(),
                             state="running", batch_id=batch, input_rows=10, updated_at=now_iso(), interval_s=5.0)
            write_heartbeat(location, beat)
            assert stop_requested(location, since=since) is None
        return time.process_time() - start
    finally:
        clients._MAX_CACHED_CLIENTS = saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from bench_common import start_s3_server  # this folder is on sys.path

    server, port = start_s3_server([sys.executable, str(REPO / "dev" / "moto_server.py")])
    try:
        os.environ.update({"AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "bench",
                           "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"})
        import boto3

        boto3.client("s3").create_bucket(Bucket="bench")
        location = "s3a://bench/streams/orders"
        spent: dict[str, list[float]] = {"a new client per call": [], "clients kept per process": []}
        for _ in range(args.runs):
            spent["a new client per call"].append(rounds_cpu(location, args.rounds, keep_clients=False))
            spent["clients kept per process"].append(rounds_cpu(location, args.rounds, keep_clients=True))
    finally:
        server.terminate()
        server.wait(timeout=30)
    base = statistics.median(spent["a new client per call"])
    for name, values in spent.items():
        median = statistics.median(values)
        print(f"{name:26} {median:6.2f} CPU-s for {args.rounds} beats and stop-request reads "
              f"(median of {args.runs}; {', '.join(f'{v:.2f}' for v in values)}), {median / base:.2f}x")


if __name__ == "__main__":
    main()
