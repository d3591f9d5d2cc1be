"""GC benchmark: garbage collection of a large synthetic S3 store against listing the same
keys with the boto3 paginator alone, in one run, on one moto S3 endpoint.

    .venv/bin/python benchmarks/gc_bench.py [--streams 10] [--snapshots 100] [--orphans 1000] [--threads 32]
    .venv/bin/python benchmarks/gc_bench.py --reuse ENDPOINT PREFIX   # measure a store built earlier (--keep)

Builds (fast: small blobs written directly with put_object, manifests built in memory) a
store of `streams x snapshots` manifests (default 1,000) referencing 99,000 blobs, plus
`orphans` unreferenced blobs (default 1,000: 100,000 blobs in all), on a moto server this
script starts on a free port. Then, each in a fresh process (so peak RSS is that phase's):

* `list`: every key of the store through the list_objects_v2 paginator, nothing else;
* `gc --dry-run`: mark (read all 1,000 manifests) and sweep the listing, deleting nothing;
* `gc`: the same with deletes, its clock set 25 h ahead so the orphans are past the 24 h
  grace period (a HEAD then a DELETE per orphan).

Prints a Markdown table and writes .bench/gc_results.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench_common import REPO, WORK  # this folder is on sys.path; it puts the repo there too

BUCKET = "gc-bench"
KEY, SECRET, REGION = "bench", "bench", "us-east-1"


def client(endpoint: str, threads: int = 16) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client("s3", endpoint_url=endpoint, region_name=REGION, aws_access_key_id=KEY,
                        aws_secret_access_key=SECRET,
                        config=Config(max_pool_connections=threads, s3={"addressing_style": "path"}))


def start_moto() -> tuple[subprocess.Popen[bytes], str]:
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).read()
            return proc, endpoint
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("moto did not start")


def build(endpoint: str, prefix: str, streams: int, snapshots: int, orphans: int, threads: int) -> dict[str, int]:
    """Blobs first (each snapshot: 100 blobs its stream shares + 98 of its own), then manifests."""
    from airflow_provider_streamstate.engine.core.manifest import FileEntry, Manifest, new_snapshot_id
    from airflow_provider_streamstate.engine.stores.base import blob_key, manifest_key

    s3 = client(endpoint, threads)
    s3.create_bucket(Bucket=BUCKET)

    def blob(name: str) -> tuple[str, bytes]:
        data = name.encode()
        return hashlib.sha256(data).hexdigest(), data

    def put(item: tuple[str, bytes]) -> None:
        s3.put_object(Bucket=BUCKET, Key=f"{prefix}/{item[0]}", Body=item[1])

    started = time.monotonic()
    manifests: list[tuple[str, bytes]] = []
    blobs: list[tuple[str, bytes]] = []
    for s in range(streams):
        stream = f"stream-{s:02d}"
        base = [blob(f"{stream} base {i}") for i in range(100)]
        blobs += [(blob_key(d), b) for d, b in base]
        for k in range(snapshots):
            own = [blob(f"{stream} snapshot {k} file {i}") for i in range(98)]
            blobs += [(blob_key(d), b) for d, b in own]
            files = [FileEntry(f"state/0/{i % 4}/{i}.delta", len(b), d) for i, (d, b) in enumerate(base + own)]
            sid = new_snapshot_id(k, None, 1)
            m = Manifest(snapshot_id=sid, stream=stream, batch_id=k, created_at="2026-11-20T00:00:00Z",
                         query_id="q", kafka_offsets={}, sources=[], watermark_ms=None, next_watermark_ms=None,
                         batch_timestamp_ms=None, state_store="hdfs", operators=[], spark_conf={}, files=files,
                         parent=None, spark_version=None)
            manifests.append((manifest_key(stream, sid), m.to_json()))
    blobs += [(blob_key(d), b) for d, b in (blob(f"orphan {i}") for i in range(orphans))]
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(put, blobs))
        list(pool.map(put, manifests))
    return {"blobs": len(blobs), "manifests": len(manifests), "build_seconds": round(time.monotonic() - started, 1)}


def peak_rss_kib() -> int:
    """This process's peak resident set (VmHWM), in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def phase(name: str, endpoint: str, prefix: str) -> dict[str, Any]:
    """One measured phase, in this (fresh) process."""
    import boto3  # noqa: F401 - imported before the baseline RSS, as both phases need it

    from airflow_provider_streamstate.backends.s3.store import S3Store
    from airflow_provider_streamstate.engine.catalog.gc import collect_garbage

    rss_before = peak_rss_kib()
    s3 = client(endpoint)
    started = time.monotonic()
    out: dict[str, Any] = {"phase": name}
    if name == "list":
        n = 0
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{prefix}/"):
            n += len(page.get("Contents", []))
        out["keys"] = n
    else:
        store = S3Store(s3, BUCKET, prefix)
        r = collect_garbage(store, dry_run=name == "gc-dry-run", parallelism=16,
                            now=time.time() + 25 * 3600 if name == "gc" else None)
        out.update({k: v for k, v in r.to_json().items() if k != "kept_unreferenced"})
    out["seconds"] = round(time.monotonic() - started, 2)
    out["peak_rss_mib"] = round(peak_rss_kib() / 1024, 1)
    out["rss_growth_mib"] = round((peak_rss_kib() - rss_before) / 1024, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--streams", type=int, default=10)
    p.add_argument("--snapshots", type=int, default=100)
    p.add_argument("--orphans", type=int, default=1000)
    p.add_argument("--threads", type=int, default=32)
    p.add_argument("--keep", action="store_true", help="leave the moto server and store running (to --reuse)")
    p.add_argument("--reuse", nargs=2, metavar=("ENDPOINT", "PREFIX"), help="measure a store a --keep run built")
    p.add_argument("--phase", help=argparse.SUPPRESS)
    p.add_argument("--endpoint", help=argparse.SUPPRESS)
    p.add_argument("--prefix", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.phase:
        print(json.dumps(phase(args.phase, args.endpoint, args.prefix)))
        return 0

    proc = None
    if args.reuse:
        endpoint, prefix = args.reuse
        built = {"reused": True}
    else:
        proc, endpoint = start_moto()
    try:
        if not args.reuse:
            prefix = f"store-{uuid.uuid4().hex[:8]}"
            built = build(endpoint, prefix, args.streams, args.snapshots, args.orphans, args.threads)
            print(f"built {built['manifests']} manifests and {built['blobs']} blobs in {built['build_seconds']}s "
                  f"at {endpoint} {prefix} (moto pid {proc.pid})", flush=True)
        results = []
        for name in ("list", "gc-dry-run", "gc"):
            out = subprocess.run([sys.executable, __file__, "--phase", name, "--endpoint", endpoint, "--prefix", prefix],
                                 capture_output=True, text=True, check=True, cwd=REPO,
                                 env={**os.environ, "PYTHONPATH": str(REPO)})
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(json.dumps(results[-1]), flush=True)
    finally:
        if proc is not None and not args.keep:
            proc.terminate()
            proc.wait(timeout=30)
    listing = results[0]
    rows = ["| phase | seconds | x listing | peak RSS MiB | RSS growth MiB | result |", "| --- | ---: | ---: | ---: | ---: | --- |"]
    for r in results:
        what = (f"{r['keys']} keys" if r["phase"] == "list" else
                f"{r['manifests']} manifests; kept {r['blobs_kept']}, deleted {r['blobs_deleted']}, young {r['blobs_young']}")
        rows.append(f"| {r['phase']} | {r['seconds']} | {r['seconds'] / listing['seconds']:.2f} | {r['peak_rss_mib']} "
                    f"| {r['rss_growth_mib']} | {what} |")
    print("\n".join(rows))
    WORK.mkdir(parents=True, exist_ok=True)
    (WORK / "gc_results.json").write_text(json.dumps({"store": built, "phases": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
