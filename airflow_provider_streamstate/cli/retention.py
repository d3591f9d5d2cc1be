"""`streamstate retention apply` and `streamstate pin|unpin`: a stream's snapshot history by policy.

    streamstate retention apply --store S --stream X --keep-last N --max-age DURATION
        [--keep-hourly DURATION] [--keep-daily DURATION] [--abandoned-max-age DURATION] [--dry-run] [--json]
    streamstate pin   --store S --stream X SNAPSHOT [--reason TEXT]
    streamstate unpin --store S --stream X SNAPSHOT
"""

from __future__ import annotations

import argparse
from typing import Any

from airflow_provider_streamstate.cli.common import (
    EXIT_OK,
    Handlers,
    Parser,
    add_parallelism,
    add_store_options,
    duration,
    open_store_from_args,
    print_result,
)


def register(commands: Any) -> Handlers:

    retention = commands.add_parser("retention", help="delete a stream's snapshots that a policy does not keep")
    retention.set_defaults(help_parser=retention)
    sub = retention.add_subparsers(dest="subcommand", metavar="SUBCOMMAND", parser_class=Parser)
    apply = sub.add_parser("apply", help="apply a retention policy to one stream (manifests only; GC frees blobs)")
    add_store_options(apply)
    apply.add_argument("--keep-last", type=int, required=True, metavar="N",
                       help="keep the newest N snapshots of the current timeline")
    apply.add_argument("--max-age", type=duration, required=True, metavar="DURATION",
                       help="keep every snapshot of the current timeline younger than this (7d, 12h, 30m)")
    apply.add_argument("--keep-hourly", type=duration, metavar="DURATION",
                       help="also keep the newest snapshot of each hour younger than this")
    apply.add_argument("--keep-daily", type=duration, metavar="DURATION",
                       help="also keep the newest snapshot of each UTC day younger than this")
    apply.add_argument("--abandoned-max-age", type=duration, metavar="DURATION",
                       help="keep snapshots of abandoned timelines only while younger than this (default: --max-age)")
    apply.add_argument("--dry-run", action="store_true", help="say what would be deleted; delete nothing")
    add_parallelism(apply)

    pin = commands.add_parser("pin", help="pin a snapshot: retention never deletes it")
    add_store_options(pin)
    pin.add_argument("snapshot_id", metavar="SNAPSHOT", help="a snapshot id or `latest`")
    pin.add_argument("--reason", default="", help="why, recorded in the pin")
    unpin = commands.add_parser("unpin", help="remove a snapshot's pin record")
    add_store_options(unpin)
    unpin.add_argument("snapshot_id", metavar="SNAPSHOT", help="a snapshot id or `latest`")
    return {("retention", "apply"): cmd_retention_apply, ("pin", None): cmd_pin, ("unpin", None): cmd_unpin}


def cmd_retention_apply(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.catalog.retention import RetentionPolicy, apply_retention

    policy = RetentionPolicy(
        keep_last=args.keep_last, max_age_s=args.max_age, keep_hourly_s=args.keep_hourly,
        keep_daily_s=args.keep_daily, abandoned_max_age_s=args.abandoned_max_age,
    )
    result = apply_retention(open_store_from_args(args), args.stream, policy, dry_run=args.dry_run, parallelism=args.parallelism)
    verb = "would delete" if result.dry_run else "deleted"
    lines = [f"{args.stream}: kept {len(result.kept)}, {verb} {len(result.deleted)} snapshot(s)"
             + ("" if result.dry_run else f" and {result.records_deleted} record(s)")]
    lines += [f"  keep   {v.snapshot_id:39} {'; '.join(v.reasons)}" for v in result.kept]
    lines += [f"  delete {v.snapshot_id:39} {'; '.join(v.reasons)}" for v in result.deleted]
    if result.deleted and not result.dry_run:
        lines.append("their blobs are freed by `streamstate gc` once the grace period has passed")
    print_result(args, result.to_json(), "\n".join(lines))
    return EXIT_OK


def _resolve(args: argparse.Namespace) -> tuple[Any, str]:
    from airflow_provider_streamstate.engine.catalog.snapshots import resolve_snapshot

    store = open_store_from_args(args)
    return store, resolve_snapshot(store, args.stream, args.snapshot_id).snapshot_id


def cmd_pin(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.catalog.retention import pin_snapshot

    store, sid = _resolve(args)
    new = pin_snapshot(store, args.stream, sid, reason=args.reason)
    print_result(args, {"stream": args.stream, "snapshot_id": sid, "pinned": True, "already": not new},
         f"pinned {sid} of {args.stream}" + ("" if new else " (it already was)"))
    return EXIT_OK


def cmd_unpin(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.catalog.retention import unpin_snapshot

    store, sid = _resolve(args)
    had = unpin_snapshot(store, args.stream, sid)
    print_result(args, {"stream": args.stream, "snapshot_id": sid, "pinned": False, "was_pinned": had},
         f"unpinned {sid} of {args.stream}" if had else f"{sid} of {args.stream} had no pin record")
    return EXIT_OK
