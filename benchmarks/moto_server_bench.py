"""The stack's S3 server (dev/moto_server.py) against `python -m moto.server`: the server's CPU
for the same requests (put, head, list of a prefix, get: S3A's and the store's mix), each
server fresh, alternately, in the same run.

    .venv/bin/python benchmarks/moto_server_bench.py [--requests 600] [--runs 3] [--bucket-keys 0]

`--bucket-keys N` first fills the bucket with N keys under other prefixes (not counted): what a
run's shared bucket holds by its end, which moto's own listing scans on every list.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SERVERS = {"python -m moto.server": [sys.executable, "-m", "moto.server"],
           "dev/moto_server.py": [sys.executable, str(REPO / "dev" / "moto_server.py")]}


def _cpu_s(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text()
    rest = stat[stat.rindex(")") + 2:].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def server_cpu(cmd: list[str], rounds: int, bucket_keys: int = 0) -> float:
    """CPU seconds the server spends on `rounds` x (put, head, list, get), in a bucket that
    holds `bucket_keys` other keys first."""
    from concurrent.futures import ThreadPoolExecutor

    import boto3
    from bench_common import start_s3_server  # this folder is on sys.path

    proc, port = start_s3_server(cmd)
    try:
        s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                          aws_access_key_id="bench", aws_secret_access_key="bench")
        s3.create_bucket(Bucket="bench-bucket")
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: s3.put_object(Bucket="bench-bucket", Key=f"other/{i % 300}/{i}", Body=b"x"),
                          range(bucket_keys)))
        before = _cpu_s(proc.pid)
        for i in range(rounds):
            key = f"state/{i % 50}/{i}.delta"
            s3.put_object(Bucket="bench-bucket", Key=key, Body=b"x" * 1000)
            s3.head_object(Bucket="bench-bucket", Key=key)
            s3.list_objects_v2(Bucket="bench-bucket", Prefix=f"state/{i % 50}/")
            assert s3.get_object(Bucket="bench-bucket", Key=key)["Body"].read() == b"x" * 1000
        return _cpu_s(proc.pid) - before
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--requests", type=int, default=600, help="rounds of put, head, list and get")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--bucket-keys", type=int, default=0, help="other keys in the bucket first")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    spent: dict[str, list[float]] = {name: [] for name in SERVERS}
    for _ in range(args.runs):
        for name, cmd in SERVERS.items():
            spent[name].append(server_cpu(cmd, args.requests, args.bucket_keys))
    base = statistics.median(spent["python -m moto.server"])
    for name, values in spent.items():
        median = statistics.median(values)
        print(f"{name:24} {median:6.2f} CPU-s for {4 * args.requests} requests in a bucket of "
              f"{args.bucket_keys} other keys (median of {args.runs}; "
              f"{', '.join(f'{v:.2f}' for v in values)}), {median / base:.2f}x")


if __name__ == "__main__":
    main()
