"""`streamstate gc`: delete the blobs of a store that no snapshot references, after a grace period.

    streamstate gc --store S [--grace DURATION] [--dry-run] [--json]
"""

from __future__ import annotations

import argparse
from typing import Any

from airflow_provider_streamstate.cli.common import (
    EXIT_OK,
    Handlers,
    add_parallelism,
    add_store_options,
    duration,
    human_bytes,
    open_store_from_args,
    print_result,
)


def register(commands: Any) -> Handlers:

    gc = commands.add_parser("gc", help="garbage-collect a store: blobs no snapshot references, after a grace period")
    add_store_options(gc, stream=False)
    gc.add_argument("--grace", type=duration, default=None, metavar="DURATION",
                    help="only delete what was last written longer ago than this (default 24h; "
                    "must exceed the longest a snapshot may take, 6h)")
    gc.add_argument("--dry-run", action="store_true", help="say what would be deleted; delete nothing")
    add_parallelism(gc)
    return {("gc", None): cmd_gc}


def cmd_gc(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.catalog.gc import DEFAULT_GRACE_SECONDS, collect_garbage

    grace = args.grace if args.grace is not None else DEFAULT_GRACE_SECONDS
    r = collect_garbage(open_store_from_args(args), grace_seconds=grace, dry_run=args.dry_run, parallelism=args.parallelism)
    verb = "would delete" if r.dry_run else "deleted"
    lines = [
        f"{r.store}: {verb} {r.blobs_deleted} blobs ({human_bytes(r.bytes_deleted)}); kept {r.blobs_kept} "
        f"({human_bytes(r.bytes_kept)}) referenced by {r.manifests} snapshots and {r.tombstones_live} recently "
        f"deleted; {r.blobs_young} young ({human_bytes(r.bytes_young)}); {r.temp_deleted} stale temp file(s) "
        f"or upload(s), {r.tombstones_deleted} old tombstone(s); {r.seconds:.1f}s",
    ]
    for reason, v in r.kept_unreferenced.items():
        lines.append(f"  kept {v['blobs']} unreferenced-looking blob(s), {human_bytes(v['bytes'])}: {reason} "
                     f"(e.g. {', '.join(e[:24] for e in v['examples'][:3])})")
    if r.blobs_missing:
        lines.append(f"  {r.blobs_missing} blob(s) referenced by live snapshots are missing from the store "
                     f"(e.g. {', '.join(e[:24] for e in r.missing_examples[:3])}): the next snapshot of their "
                     "streams stores them again; `streamstate verify` names the snapshots affected")
    print_result(args, r.to_json(), "\n".join(lines))
    return EXIT_OK
