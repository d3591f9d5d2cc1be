"""Streams UI benchmark: each page and API answer of the Streams pages for a stream with
1,000 snapshots, through Airflow's own API server app (auth included), against the catalog
read they are built on.

    .venv/bin/python benchmarks/ui_bench.py [--snapshots 1000] [--runs 5] [--workdir DIR] [--dag-runs 200]

Builds, with the engine's real snapshot path on a small fake checkpoint (tests/unit/
fake_checkpoint.py), a LocalStore holding `--snapshots` snapshots of stream `orders`: a
rollback at 70% of them (a second timeline), a validation record on every 10th (every 3rd of
those failed), 3 pins, 2 clones, and a DR store holding all but the newest 20 (replicated).
The primary store's catalog index is left as retention leaves it (warm). Then, in a private
Airflow home (SQLite, SimpleAuthManager) holding `--dag-runs` runs of the scheduled snapshot
DAG, each given the stream and the DR store (every page reads the newest 200), times each request `--runs` times with a token
Airflow minted and reports medians, next to the baseline `list_summaries` (the index read
every page starts from), with the CPU each request cost the process (`time.process_time()`
around it: the app's threads and the in-process client's, Airflow's gzip of the answer too;
the floor, a signed-in request that reads nothing, shows what Airflow's auth, the
configuration and the client cost); then the Streams and history pages again with a new
validation record written before each request (not timed), as when the store changed since
the last view, and the Streams page reading the configuration (the Variables and the DAG
runs, read at most every 5 s otherwise) at every request. The DR store's history is timed once with its index never built
(replication copies manifests, not index segments), then again after `list_summaries` built
it, as the scheduled DAG's `retention_dr` leaves it. `--workdir` keeps (and on a second run
reuses) the built stores. Writes .bench/ui_results.json.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.bench_common import write_results  # noqa: E402


def build(root: Path, n: int) -> tuple[Path, object, object, list[str]]:
    from airflow_provider_streamstate.backends.local.store import LocalStore
    from airflow_provider_streamstate.engine.catalog.index import list_summaries
    from airflow_provider_streamstate.engine.catalog.retention import pin_snapshot
    from airflow_provider_streamstate.engine.lifecycle.replicate import replicate
    from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
    from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
    from airflow_provider_streamstate.engine.streams.clones import record_clone
    from tests.unit.fake_checkpoint import make_checkpoint
    from tests.unit.store_history import put_validation
    from tests.unit.test_timelines import grow

    # The fake checkpoint was written a moment ago and has no heartbeat: what an unmanaged query
    # writing it looks like; the rollback's in-place restore is told it is stopped.
    os.environ["STREAMSTATE_UNMANAGED_WINDOW_S"] = "0"
    ckpt = make_checkpoint(root / "ckpt", batches=1)
    store, dr = LocalStore(root / "store", fsync=False), LocalStore(root / "dr", fsync=False)
    ids: list[str] = []
    rollback_at = int(n * 0.7)
    batch = 0
    for i in range(n):
        if i == rollback_at:
            restore_snapshot(store, "orders", ids[rollback_at // 2], ckpt, force=True, fsync=False)
            batch = int(ids[rollback_at // 2][:12])
        batch += 1
        grow(ckpt, batch)
        sid = create_snapshot(str(ckpt), store, "orders").manifest.snapshot_id
        ids.append(sid)
        if i % 10 == 0:
            put_validation(store, "orders", sid, "shape", i % 30 != 0)
    for sid in (ids[0], ids[rollback_at // 2], ids[-1]):
        pin_snapshot(store, "orders", sid, reason="bench")
    for k, sid in enumerate((ids[n // 3], ids[-5])):
        record_clone(store, clone=f"orders-clone{k}", source_stream="orders", checkpoint=str(root / f"clone{k}"),
                     snapshot_id=sid, expires_at="2099-01-01T00:00:00Z", sinks={})
    replicate(store, dr, "orders", snapshots=ids[:-20])
    list_summaries(store, "orders")  # the index, as retention and `snapshot list` leave it
    return ckpt, store, dr, ids


def reuse(root: Path) -> tuple[Path, object, object, list[str]]:
    """The stores a previous run built in `root`."""
    from airflow_provider_streamstate.backends.local.store import LocalStore
    from airflow_provider_streamstate.engine.catalog.timeline import snapshot_refs

    store, dr = LocalStore(root / "store", fsync=False), LocalStore(root / "dr", fsync=False)
    return root / "ckpt", store, dr, [r.snapshot_id for r in snapshot_refs(store, "orders")]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--snapshots", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--workdir", type=Path, default=None, help="build here, or reuse what a run built here")
    ap.add_argument("--dag-runs", type=int, default=200,
                    help="runs of the scheduled snapshot DAG in the metadata DB (the pages read the newest 200)")
    a = ap.parse_args()

    work = (a.workdir or Path(tempfile.mkdtemp(prefix="streamstate-ui-bench-"))).resolve()  # SQLite wants it absolute
    work.mkdir(parents=True, exist_ok=True)
    from dev import airflow_home

    airflow_home.configure_env(work / "airflow")
    os.environ["AIRFLOW__API_AUTH__JWT_SECRET"] = secrets.token_urlsafe(64)
    t0 = time.monotonic()
    reused = (work / "store" / "streams" / "orders").exists()
    ckpt, store, dr, ids = reuse(work) if reused else build(work, a.snapshots)
    built = time.monotonic() - t0
    print(f"{'reused' if reused else 'built'} {len(ids)} snapshots in {built:.0f}s", file=sys.stderr)
    pick = {"newest": ids[-1], "failed": ids[30]}  # every 30th validation failed
    airflow_home.prepare(work / "airflow")
    # The DAGs in the metadata DB, as the DAG processor leaves them: the pages list the runs of
    # DAGs the user may read, and a DAG's runs are only readable once the DAG is known.
    subprocess.run([str(Path(sys.executable).parent / "airflow"), "dags", "reserialize"], check=True,
                   capture_output=True, env=os.environ.copy())

    from airflow.api_fastapi.app import create_app, get_auth_manager
    from airflow.models.variable import Variable
    from fastapi.testclient import TestClient

    from airflow_provider_streamstate.engine.catalog.index import list_summaries

    spec = {"name": "orders", "checkpoint": str(ckpt), "store": store.url}  # type: ignore[attr-defined]
    Variable.set("streamstate_streams", [spec], serialize_json=True)
    # The DR store comes from the DAG runs' conf, as the scheduled snapshot DAG takes it.
    _record_dr_runs(spec, dr.url, a.dag_runs)  # type: ignore[attr-defined]
    app = create_app()
    am = get_auth_manager()
    headers = {"Authorization": f"Bearer {am.generate_jwt(am.get_users()[0])}"}
    results: dict[str, object] = {"snapshots": len(ids), "build_seconds": None if reused else round(built, 1),
                                  "runs": a.runs}

    def timed(name: str, fn: object, before: object = None) -> None:
        times, cpu = [], []
        for _ in range(a.runs):
            if before is not None:
                before()  # type: ignore[operator]  # not timed
            t, c = time.monotonic(), time.process_time()
            fn()  # type: ignore[operator]
            cpu.append(time.process_time() - c)
            times.append(time.monotonic() - t)
        results[f"{name}_median_s"] = round(statistics.median(times), 3)
        results[f"{name}_max_s"] = round(max(times), 3)
        results[f"{name}_cpu_median_ms"] = round(statistics.median(cpu) * 1000, 1)
        print(f"{name}: median {statistics.median(times):.3f}s, max {max(times):.3f}s, "
              f"CPU median {statistics.median(cpu) * 1000:.1f} ms", file=sys.stderr)

    timed("baseline_list_summaries", lambda: list_summaries(store, "orders", update_index=False))  # type: ignore[arg-type]
    with TestClient(app) as client:
        def get(path: str) -> None:
            r = client.get(path, headers=headers)
            assert r.status_code == 200, (path, r.status_code, r.text[:300])
        get("/streamstate/api/streams")  # first request: imports, DB connection
        dr_history = f"/streamstate/streams/orders?store={dr.url}"  # type: ignore[attr-defined]
        if not dr.list_records("streams/orders/index/"):  # type: ignore[attr-defined]  # never built yet
            for view in ("first", "second"):  # the second from what the API server remembered
                t = time.monotonic()
                get(dr_history)
                results[f"history_page_in_dr_store_index_never_built_{view}_view_s"] = round(time.monotonic() - t, 3)
                print(f"DR history, index never built, {view} view: {time.monotonic() - t:.3f}s", file=sys.stderr)
        list_summaries(dr, "orders")  # type: ignore[arg-type]  # as retention_dr leaves it
        pages = {
            # the floor: a request that only signs in and reads the configuration (the stream names no
            # Kafka connection, so its lag answer asks nothing more)
            "floor_signed_in_request": "/streamstate/api/streams/orders/lag",
            "streams_page": "/streamstate/streams",
            "streams_api": "/streamstate/api/streams",
            "history_page": "/streamstate/streams/orders",
            "history_api": "/streamstate/api/streams/orders",
            "snapshot_page": f"/streamstate/streams/orders/snapshots/{pick['newest']}",
            "snapshot_api": f"/streamstate/api/streams/orders/snapshots/{pick['failed']}",
            "snapshot_page_in_dr_store": f"/streamstate/streams/orders/snapshots/{pick['failed']}?store={dr.url}",  # type: ignore[attr-defined]
            "history_page_in_dr_store": dr_history,
        }
        for name, path in pages.items():
            timed(name, lambda p=path: get(p))
        # The same pages when the store changed since the last view (a validation record each time:
        # every listing worked out again, the history drawn again; the index segments stay parsed).
        from tests.unit.store_history import put_validation

        suite, fresh = f"fresh-{secrets.token_hex(4)}", iter(ids[1::3])  # a suite of this run's: new records
        for name in ("streams_page", "history_page"):
            timed(f"{name}_after_a_new_validation", lambda p=pages[name]: get(p),
                  before=lambda: put_validation(store, "orders", next(fresh), suite, True))  # type: ignore[arg-type]
        # The configuration (Variables, DAG runs) is read at most every CONFIGURATION_SECONDS: the
        # Streams page when it is read at every request.
        from airflow_provider_streamstate.plugins import app as pages_app

        kept_for, pages_app.CONFIGURATION_SECONDS = pages_app.CONFIGURATION_SECONDS, 0.0
        timed("streams_page_configuration_read", lambda: get(pages["streams_page"]))
        pages_app.CONFIGURATION_SECONDS = kept_for
        results["history_page_kib"] = round(len(client.get(pages["history_page"], headers=headers).content) / 1024)
        rows = client.get("/streamstate/api/streams", headers=headers).json()["streams"]
        results["dr_snapshots_behind"] = rows[0]["dr"]["snapshots_behind"]
    slowest = max(v for k, v in results.items() if k.endswith("_max_s") and not k.startswith("baseline"))
    results["slowest_answer_s"] = slowest
    results["all_within_1s"] = slowest < 1.0  # type: ignore[operator]
    results["most_cpu_ms"] = max(v for k, v in results.items() if k.endswith("_cpu_median_ms")
                                 and not k.startswith("baseline"))
    write_results("ui", results)


def _record_dr_runs(spec: dict[str, str], dr_store: str, n: int) -> None:
    """Up to `n` runs of streamstate_scheduled_snapshot, every 5 minutes, each given the stream
    and the DR store (as the scheduled DAG takes them): the pages read the newest at every request."""
    from datetime import UTC, datetime, timedelta

    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    with create_session() as session:
        have = session.scalar(select(func.count()).select_from(DagRun)
                              .where(DagRun.dag_id == "streamstate_scheduled_snapshot")) or 0
        now = datetime.now(UTC)
        for i in range(have, n):
            session.add(DagRun(dag_id="streamstate_scheduled_snapshot", run_id=f"bench-{i}", run_type="manual",
                               conf={"streams": [spec], "dr_store": dr_store}, state="success",
                               run_after=now - timedelta(minutes=5 * i)))


if __name__ == "__main__":
    main()
