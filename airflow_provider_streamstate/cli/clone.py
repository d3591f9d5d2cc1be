"""`streamstate clone list|expire`: clones recorded in a store, and tearing down expired ones.

    streamstate clone list   --store S [--stream SOURCE] [--json]
    streamstate clone expire --store S [--stream SOURCE] [--clone NAME]... [--force]
                             [--kafka-bootstrap HOST:PORT] [--dry-run] [--json]
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from airflow_provider_streamstate.cli.common import (
    EXIT_OK,
    EXIT_USAGE,
    Handlers,
    Parser,
    add_kafka_options,
    add_store_options,
    kafka_config_from_args,
    open_store_from_args,
    print_result,
)


def register(commands: Any) -> Handlers:

    clone = commands.add_parser("clone", help="list clones recorded in a store, expire them")
    clone.set_defaults(help_parser=clone)
    sub = clone.add_subparsers(dest="subcommand", metavar="SUBCOMMAND", parser_class=Parser)
    lst = sub.add_parser("list", help="clones recorded in the store, soonest expiry first")
    add_store_options(lst, stream=False)
    lst.add_argument("--stream", default=None, help="only clones of this source stream")
    exp = sub.add_parser("expire", help="tear down expired clones: stop, delete checkpoint, snapshots, topics")
    add_store_options(exp, stream=False)
    exp.add_argument("--stream", default=None, help="only clones of this source stream")
    exp.add_argument("--clone", action="append", default=[], metavar="NAME", help="only this clone (repeatable)")
    exp.add_argument("--force", action="store_true", help="with --clone: expire it now, whatever its expiry")
    add_kafka_options(exp, required=False, help="the cluster of clones whose topics are to be deleted on expiry")
    exp.add_argument("--dry-run", action="store_true", help="say what would be torn down; change nothing")
    return {("clone", "list"): cmd_clone_list, ("clone", "expire"): cmd_clone_expire}


def cmd_clone_list(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.streams.clones import list_clones

    now = datetime.now(UTC).timestamp()
    records = list_clones(open_store_from_args(args), args.stream)
    rows = [{**r.to_json(), "expired": r.expired(now)} for r in records]
    rows = [{k: v for k, v in row.items() if k != "format"} for row in rows]
    lines = [f"{'CLONE':28} {'SOURCE':20} {'EXPIRES':22} {'SNAPSHOT':39} CHECKPOINT"]
    for r in rows:
        mark = " (expired)" if r["expired"] else ""
        lines.append(f"{r['clone']:28} {r['source_stream']:20} {r['expires_at'][:19] + mark:22} "
                     f"{r['snapshot_id']:39} {r['checkpoint']}")
    print_result(args, rows, "\n".join(lines) if rows else "no clones recorded")
    return EXIT_OK


def cmd_clone_expire(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.streams.clones import expire_clones

    if args.force and not args.clone:
        import sys

        print("streamstate: error: --force expires only the clones named with --clone", file=sys.stderr)
        return EXIT_USAGE
    client = kafka_config_from_args(args) or {}
    config = (lambda _r: {**client, "bootstrap.servers": args.kafka_bootstrap}) if args.kafka_bootstrap else None
    r = expire_clones(open_store_from_args(args), source_stream=args.stream, names=args.clone or None, force=args.force,
                      dry_run=args.dry_run, kafka_config=config)
    verb = "would expire" if r.dry_run else "expired"
    lines = [f"{verb} {len(r.expired)} clone(s); {r.not_expired} not expired yet"]
    for e in r.expired:
        lines.append(f"  {e.clone} (of {e.source_stream}, expired {e.expires_at}): stream {e.stopped}, "
                     f"checkpoint {'deleted' if e.checkpoint_deleted else 'kept'}, {e.snapshots_deleted} snapshot(s), "
                     f"topics {', '.join(e.topics_deleted) or '-'}" + "".join(f"; {n}" for n in e.notes))
    print_result(args, r.to_json(), "\n".join(lines))
    return EXIT_OK
