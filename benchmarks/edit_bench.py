"""Edit benchmark: repairing 100 keys of a stopped stream instead of replaying its input.

    .venv/bin/python benchmarks/edit_bench.py [--keys 1000000] [--partitions 4] [--work DIR] [--state CKPT]

The state is the stopped RocksDB checkpoint (changelog checkpointing on) that
benchmarks/rescale_bench.py verifies a rescale on (its `_built_state`: tests/apps/keyed_state.py,
a deduplication with a 10-minute watermark, then count, sum and max per account over
`--batches` batches of `--keys` new accounts, then one batch updating 1% of them), built here
by the main Spark line (dev/spark_versions.py, the main .venv's pyspark).

* **baseline, the replay**: what a rollback to an empty (or too-old) state replays is the
  whole input; its cost is the time Spark took to build the state from it: the build's wall
  time (Spark's start and the writing of the input files included), and the streaming
  query's own, from batch 0's batch timestamp to the newest commit's write.
* **the edit**: 100 accounts spread over the key range (so over the partitions), 50 deleted
  and 50 set to new values, in the aggregation's store; `edit_stream(..., apply=True)` as a
  clone (`target`) and in place, each (a) verified without Spark only and (b) with Spark's
  check as well (the edit check job submitted with the main line's spark-submit on
  `local[2]`), and each proved (`--verify`) by its changes (the default: the source's files
  unchanged, the new files decoded) and by digests of the whole state. Each run starts from its own copy of the built checkpoint and its own local
  store (fsync on), and takes its own source snapshot of the stopped stream. Its phases are
  `EditResult.seconds`; the bytes the edit wrote are the edit batch's files (one state file
  per store partition, its offsets and commit), against the source snapshot's state files.
* **references**: the dry run's seconds; a plain `restore_snapshot` of the same source
  snapshot into a new directory (what any change on a work copy pays at least); the state
  digest of the checkpoint without and with the placement check (what the edit's
  verification reads: the whole state, at N and at N+1).

Prints Markdown tables; writes the figures as JSON beside the work directory
(`<work>.json`). `--work DIR` keeps the work directory (its `ckpt` can be given as
`--state` to a later run); without it a temporary one under .bench/ is removed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_common import WORK, MiB  # this folder is on sys.path; it puts the repo there too
from rescale_bench import _built_state, _tree_bytes

from dev import spark_versions

EDITED_KEYS = 100  # half deleted, half set
STREAM = "orders"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--keys", type=int, default=1_000_000, help="accounts in the state")
    p.add_argument("--partitions", type=int, default=4, help="state partitions of the built state")
    p.add_argument("--batches", type=int, default=4, help="batches that build the state (one more updates 1%%)")
    p.add_argument("--verify", nargs="+", choices=["changes", "state"], default=["changes", "state"],
                   help="how each edit is proved (edit_stream's verify=), every run once per way")
    p.add_argument("--work", help="the work directory, kept (default: a temporary one under .bench/, removed)")
    p.add_argument("--state", help="a checkpoint built by tests/apps/keyed_state.py with --keys accounts, to use "
                                   "(copied, left as it is) instead of building one")
    args = p.parse_args(argv)
    args.to = 0  # what _built_state reads (a rescale's target; unused here)

    line = spark_versions.get(spark_versions.MAIN_LINE).require()
    WORK.mkdir(parents=True, exist_ok=True)
    work = Path(args.work).resolve() if args.work else Path(tempfile.mkdtemp(prefix="edit-", dir=WORK))
    work.mkdir(parents=True, exist_ok=True)
    os.environ["STREAMSTATE_HOME"] = str(work / "home")  # the check job's logs
    # The state was written by the build, whose query has stopped: not a query running on it.
    os.environ["STREAMSTATE_UNMANAGED_WINDOW_S"] = "0"
    try:
        results = _run(args, line, work)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    out = work.with_name(f"{work.name}.json")
    out.write_text(json.dumps(results, indent=1))
    _print(results)
    print(f"\nresults: {out}")
    return 0


def _run(args: argparse.Namespace, line: Any, work: Path) -> dict[str, Any]:
    from airflow_provider_streamstate.backends.local.store import LocalStore
    from airflow_provider_streamstate.engine.catalog.snapshots import resolve_snapshot
    from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
    from airflow_provider_streamstate.engine.edit.changes import EditSpec
    from airflow_provider_streamstate.engine.edit.repair import edit_stream
    from airflow_provider_streamstate.engine.edit.spark_check import edit_check_application
    from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
    from airflow_provider_streamstate.engine.lookup.digest import state_digest

    t = time.monotonic()
    built_now = not args.state and not (work / "ckpt" / "commits").exists()
    if not built_now and not args.state:
        args.state = str(work / "ckpt")  # a kept work directory's state, reused
    built, batch, _ = _built_state(args, line, work)
    build_wall = time.monotonic() - t if built_now else None
    reader = CheckpointReader(str(built))
    first = int(reader.offsets(0)[0]["batchTimestampMs"]) / 1000
    streaming = (built / "commits" / str(batch)).stat().st_mtime - first
    agg, sample = _aggregation(str(built))
    edit = _edit(args.keys, sample)
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "keys": args.keys,
        "partitions": args.partitions, "spark": line.pyspark, "batch": batch,
        "replay": {"input records": args.keys + max(1, args.keys // 100), "batches": batch + 1,
                   "build wall s": build_wall, "streaming s": streaming},
        "state bytes on disk (state/, every version kept)": _tree_bytes(built / "state"),
        "operator": agg, "load before": os.getloadavg()[0], "runs": {},
    }
    print(f"replay: {results['replay']}", flush=True)

    def command(job_args: Any) -> tuple[list[str], dict[str, str]]:
        return line.submit_command(edit_check_application(), list(job_args)), line.env()

    def copy(name: str) -> tuple[Path, Any]:
        checkpoint = work / name / STREAM
        shutil.rmtree(work / name, ignore_errors=True)
        shutil.copytree(built, checkpoint)
        return checkpoint, LocalStore(work / name / "store")

    checkpoint, store = copy("dry")
    t = time.monotonic()
    dry = edit_stream(store, STREAM, str(checkpoint), EditSpec.from_json(edit, "bench"))
    results["dry run s"] = time.monotonic() - t
    results["dry run"] = {"changed": dry.preview.changed, "partitions": sorted({p.partition for p in
                                                                              dry.preview.partitions})}
    for label, digest_args in (("digest at N, no placement check", {"placement": False}),
                               ("digest at N, placement checked", {})):
        t = time.monotonic()
        d = state_digest(str(checkpoint), batch, **digest_args)  # type: ignore[arg-type]
        results[f"{label} s"] = time.monotonic() - t
        results["entries at N"] = sum(s.entries for s in d.stores)
    print(f"dry run {results['dry run s']:.2f} s, {results['dry run']}; digests "
          f"{results['digest at N, no placement check s']:.1f} / {results['digest at N, placement checked s']:.1f} s",
          flush=True)

    for how, check, verify in [(h, c, v) for h in ("clone", "in place") for c in ("no Spark", "Spark check")
                           for v in args.verify]:
        label = f"{how}, {check}" + (f", by {verify}" if len(args.verify) > 1 else "")
        name = label.replace(" ", "-").replace(",", "")
        checkpoint, store = copy(name)
        target = str(work / name / "clone") if how == "clone" else None
        load = os.getloadavg()[0]
        t = time.monotonic()
        result = edit_stream(store, STREAM, str(checkpoint), EditSpec.from_json(edit, "bench"), apply=True,
                             target=target, command=command if check == "Spark check" else None, verify=verify)
        wall = time.monotonic() - t
        assert result.edit_batch == batch + 1 and result.checkpoint is not None
        source = resolve_snapshot(store, STREAM, str(result.source_snapshot))
        state = sum(f.size for f in source.files if f.path.startswith("state/"))
        files, written = _edit_batch_files(Path(result.checkpoint), batch + 1)
        run = {"seconds": dict(result.seconds), "wall s": wall, "load before": load,
               "edit batch files": files, "edit batch bytes": written, "state bytes (snapshot N)": state,
               "snapshot bytes (N)": sum(f.size for f in source.files), "changed": result.preview.changed,
               "spark": result.spark, "verified": result.verified}
        if how == "in place" and check == "no Spark" and "plain restore s" not in results:
            t = time.monotonic()
            restore_snapshot(store, STREAM, str(result.source_snapshot), str(work / name / "plain-restore"))
            results["plain restore s"] = time.monotonic() - t
        results["runs"][label] = run
        print(f"{label}: {wall:.1f} s {json.dumps({k: round(v, 2) for k, v in result.seconds.items()})}",
              flush=True)
        shutil.rmtree(work / name, ignore_errors=True)
    shutil.rmtree(work / "dry", ignore_errors=True)
    results["load after"] = os.getloadavg()[0]
    return results


def _aggregation(checkpoint: str) -> tuple[int, dict[str, Any]]:
    """The aggregation's operator id (its key is the account) and the state of one account."""
    from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
    from airflow_provider_streamstate.engine.lookup.api import lookup_key

    reader = CheckpointReader(checkpoint)
    for op in reader.plan(reader.resolve_batch(None)).operators:
        op_id = int(op["operator_id"])
        try:
            found = lookup_key(checkpoint, key=[_account(0)], operator=op_id)
        except Exception:  # noqa: BLE001 - the deduplication's key is (txn, ts): not this operator
            continue
        if found.found and found.key_schema is not None and found.key_schema.names == ["account"]:
            return op_id, found.to_json()
    raise SystemExit(f"{checkpoint} has no aggregation keyed by account")


def _account(i: int) -> str:
    return f"acct-{i:09d}"  # tests/apps/keyed_state.py's accounts


def _edit(keys: int, sample: dict[str, Any]) -> dict[str, Any]:
    """Accounts evenly spread over the key range (hashing spreads them over the partitions):
    every other one deleted, the others set to a new value (every column of the sample's,
    numbers moved)."""
    picked = [_account(int((i + 0.5) * keys / EDITED_KEYS)) for i in range(EDITED_KEYS)]
    value = sample["value"]
    new = {k: (v + 1000 if isinstance(v, int) else v) for k, v in value.items()}
    return {"operator": sample["operator_id"], "delete": [[a] for a in picked[0::2]],
            "set": [{"key": [a], "value": new} for a in picked[1::2]]}


def _edit_batch_files(checkpoint: Path, batch: int) -> tuple[int, int]:
    """The files of edit batch `batch` (state version batch + 1 in every store partition,
    its offsets and commit): how many, and their bytes."""
    version = batch + 1
    names = [f for f in (checkpoint / "state").rglob("*") if f.is_file()
             and (f.name.startswith((f"{version}.", f"{version}_")))]
    names += [checkpoint / "offsets" / str(batch), checkpoint / "commits" / str(batch)]
    return len(names), sum(f.stat().st_size for f in names)


def _print(r: dict[str, Any]) -> None:
    replay = r["replay"]
    print(f"\n{r['keys']:,} keys, {r['partitions']} partitions, Spark {r['spark']}: {r['entries at N']:,} entries at "
          f"batch {r['batch']}; replay of {replay['input records']:,} records in {replay['batches']} batches: "
          f"streaming {replay['streaming s']:.1f} s"
          + (f", build {replay['build wall s']:.1f} s wall" if replay["build wall s"] else ""))
    phases = ("snapshot", "restore", "write", "verify", "spark_check", "swap", "snapshot_edited", "total")
    runs = r["runs"]
    print("\n| phase (s) | " + " | ".join(runs) + " |\n|---|" + "---:|" * len(runs))
    for k in phases:
        print(f"| {k} | " + " | ".join(f"{v['seconds'][k]:.2f}" if k in v["seconds"] else "-"
                                       for v in runs.values()) + " |")
    print("| replay (streaming) / total | " + " | ".join(f"{replay['streaming s'] / v['seconds']['total']:.1f}x"
                                                        for v in runs.values()) + " |")
    one = next(iter(runs.values()))
    print(f"\nedit batch: {one['edit batch files']} files, {one['edit batch bytes']:,} bytes; state (snapshot N's "
          f"state files) {one['state bytes (snapshot N)'] / MiB:.1f} MiB: "
          f"{one['edit batch bytes'] / one['state bytes (snapshot N)']:.2e}x")
    print(f"dry run {r['dry run s']:.2f} s; plain restore {r['plain restore s']:.2f} s; digest at N "
          f"{r['digest at N, no placement check s']:.2f} s (placement checked "
          f"{r['digest at N, placement checked s']:.2f} s)")


if __name__ == "__main__":
    sys.exit(main())
