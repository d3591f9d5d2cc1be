"""Catalog benchmark: a stream's history of many snapshots in an S3 store, listed, resolved
and planned for retention through the catalog index, against reading every manifest.

    .venv/bin/python benchmarks/catalog_bench.py [--snapshots 10000] [--files 1000] [--validated 0.1]

Builds `--snapshots` manifests of a `--files`-file state (one stream, one timeline, a
validation record on a fraction of them) straight into a moto S3 server on loopback, then
times, in one run on the same store:

* baseline: `list_snapshots` (every manifest read and validated: what `snapshot list` and
  retention did before the index);
* `snapshot list` through the index, cold (no index yet: every manifest read once, one
  segment written) and warm (segments only);
* `latest` through the catalog head the last snapshot's writer left (a record read and one
  listing from its id; of manifests over 256 KiB, `--files 2000`, the head carries the header
  line and the listing checks it against the split header), and without it (a store written
  before heads: from the index's newest id);
* a retention plan (dry run) of keep-last 100, warm;

with the S3 requests each sent, by operation. Writes .bench/catalog_results.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_common import moto_s3, write_results  # noqa: E402

BUCKET = "catalog"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--snapshots", type=int, default=10_000)
    ap.add_argument("--files", type=int, default=1_000)
    ap.add_argument("--validated", type=float, default=0.1, help="fraction of snapshots with a validation record")
    a = ap.parse_args()



    from airflow_provider_streamstate.backends.s3.store import S3Store
    from airflow_provider_streamstate.engine.catalog import validation_records as vr
    from airflow_provider_streamstate.engine.catalog.head import MAX_EMBEDDED, head_key, write_head
    from airflow_provider_streamstate.engine.catalog.index import list_summaries
    from airflow_provider_streamstate.engine.catalog.retention import RetentionPolicy, apply_retention
    from airflow_provider_streamstate.engine.catalog.snapshots import list_snapshots, resolve_snapshot
    from airflow_provider_streamstate.engine.catalog.timeline import load_timelines
    from airflow_provider_streamstate.engine.core.manifest import FileEntry, Manifest, new_snapshot_id
    from airflow_provider_streamstate.engine.stores.base import manifest_key

    server, c, backend = moto_s3(BUCKET)
    store = S3Store(c, BUCKET, "store")

    t = time.monotonic()
    start = datetime(2026, 1, 1, tzinfo=UTC)
    files = [FileEntry(f"state/0/{p}/{v}.delta", 4096 + p, f"{(p * 7919 + v):064x}", 1_700_000_000_000_000_000 + v)
             for p in range(max(1, a.files // 10)) for v in range(10)][: a.files]
    every = max(1, round(1 / a.validated)) if a.validated > 0 else 0
    manifest_bytes = 0
    for b in range(a.snapshots):
        created = start + timedelta(minutes=15 * b)
        sid = new_snapshot_id(b, created, 1)
        m = Manifest(
            snapshot_id=sid, stream="orders", batch_id=b, created_at=created.isoformat().replace("+00:00", "Z"),
            query_id="q", kafka_offsets={"orders": {str(p): 1000 * b + p for p in range(8)}}, sources=[],
            watermark_ms=None, next_watermark_ms=None, batch_timestamp_ms=None, state_store="rocksdb",
            operators=[], spark_conf={}, files=files, parent=None, spark_version=None,
            labels={"reason": "schedule"}, checkpoint="s3a://ckpt/orders", created_by="bench", timeline=1,
        )
        body = m.to_json()
        manifest_bytes += len(body)
        backend.put_object(BUCKET, f"store/{manifest_key('orders', sid)}", body)
        if every and b % every == 0:
            rec = vr.ValidationRecord(
                stream="orders", snapshot_id=sid, batch_id=b, suite="shape", suite_sha256="0" * 64,
                success=b % (every * 3) != 0, validated_at="2026-01-01T00:00:00Z", gx_version="bench",
                duration_s=1.0, selector={},
                results=[vr.ExpectationOutcome("expect_column_values_to_not_be_null", {"column": "key"},
                                               b % (every * 3) != 0, None)],
            )
            backend.put_object(BUCKET, f"store/{vr.validation_key('orders', sid, 'shape')}", rec.to_bytes())
    # The head the last snapshot's writer leaves (lifecycle/snapshot.py publishes, then writes it).
    write_head(store, "orders", m, body, load_timelines(store, "orders"))
    print(f"built {a.snapshots} manifests ({manifest_bytes / a.snapshots / 1024:.0f} KiB each) "
          f"in {time.monotonic() - t:.0f}s", file=sys.stderr)

    requests: Counter[str] = Counter()
    c.meta.events.register("before-call.s3.*", lambda model, **_: requests.update([model.name]))
    results: dict[str, object] = {"snapshots": a.snapshots, "files_per_snapshot": a.files,
                                  "manifest_kib": round(manifest_bytes / a.snapshots / 1024, 1),
                                  # over MAX_EMBEDDED, the head carries the newest's header line alone
                                  "head_carries": "header line" if len(body) > MAX_EMBEDDED else "whole manifest"}

    def timed(name: str, fn: object) -> object:
        requests.clear()
        t0 = time.monotonic()
        out = fn()  # type: ignore[operator]
        results[f"{name}_seconds"] = round(time.monotonic() - t0, 3)
        results[f"{name}_requests"] = dict(requests)
        print(f"{name}: {results[f'{name}_seconds']}s {dict(requests)}", file=sys.stderr)
        return out

    baseline = timed("baseline_read_every_manifest", lambda: list_snapshots(store, "orders", parallelism=16))
    cold = timed("list_cold_index", lambda: list_summaries(store, "orders", parallelism=16))
    warm = timed("list_warm_index", lambda: list_summaries(store, "orders", parallelism=16))
    assert [s.snapshot_id for s in warm.snapshots] == [m.snapshot_id for m in baseline.manifests]  # type: ignore[attr-defined]
    newest = timed("latest", lambda: resolve_snapshot(store, "orders", "latest"))
    assert newest.snapshot_id == m.snapshot_id  # type: ignore[attr-defined]
    store.delete_record(head_key("orders"))  # a store written before the head: from the index's newest id
    timed("latest_without_head", lambda: resolve_snapshot(store, "orders", "latest"))
    plan = timed("retention_plan_warm", lambda: apply_retention(
        store, "orders", RetentionPolicy(keep_last=100), dry_run=True, parallelism=16,
        now=(start + timedelta(minutes=15 * a.snapshots)).timestamp()))
    results["retention_plan_kept"] = len(plan.kept)  # type: ignore[attr-defined]
    results["cold_manifests_read"] = cold.manifests_read  # type: ignore[attr-defined]
    results["warm_manifests_read"] = warm.manifests_read  # type: ignore[attr-defined]
    results["warm_over_baseline"] = round(
        float(results["list_warm_index_seconds"]) / float(results["baseline_read_every_manifest_seconds"]), 4)  # type: ignore[arg-type]
    server.stop()

    write_results("catalog", results)


if __name__ == "__main__":
    main()
