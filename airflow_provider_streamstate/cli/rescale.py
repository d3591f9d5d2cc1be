"""`streamstate rescale`: a stateful stream's state spread over another number of partitions,
from a snapshot, verified key by key, put in place (the stream stopped; the source snapshot
pinned for a rollback) or written as a clone.

    streamstate rescale --spec SPEC --partitions N (--in-place | --target CKPT [--clone-name NAME])
                        [--snapshot SNAPSHOT] [--master M] [--deploy-mode client|cluster]
                        [--timeout SECONDS] [--ship-code | --no-ship-code] [--json]

SPEC is the stream's StreamSpec (JSON, or a file holding it): its checkpoint and store, and
the Spark the repartition runs on (the stream's own: Spark 4.2 or later). SNAPSHOT is an id,
`latest` or `latest-good:<suite>`; by default a new snapshot of the stopped stream.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from airflow_provider_streamstate.cli.common import (
    EXIT_OK,
    Handlers,
    add_parallelism,
    duration,
    print_result,
    read_spec,
    use_spec_connection,
)

log = logging.getLogger("streamstate.cli")


def register(commands: Any) -> Handlers:
    p = commands.add_parser("rescale", help="repartition a stream's state (Spark 4.2+), verified, in place or as a "
                                            "clone")
    p.add_argument("--spec", required=True, help="the stream's StreamSpec: JSON, or a file holding it")
    p.add_argument("--partitions", type=int, required=True, metavar="N", help="the number of state partitions")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--in-place", action="store_true",
                       help="put the rescaled state in place of the stopped stream's checkpoint")
    where.add_argument("--target", metavar="CKPT", help="write the rescaled state as a clone at this checkpoint")
    p.add_argument("--clone-name", metavar="NAME", help="the clone's name in the store (default <stream>-rescaled)")
    p.add_argument("--snapshot", default=None, help="the source snapshot (default: a new one of the stopped stream)")
    p.add_argument("--master", default=None, help="spark-submit's master for the repartition (over the spec's)")
    p.add_argument("--deploy-mode", choices=["client", "cluster"], default=None,
                   help="where the repartition's driver runs")
    p.add_argument("--timeout", type=duration, default=None, metavar="SECONDS",
                   help="how long the repartition may run before it is killed (default: no limit)")
    p.add_argument("--ship-code", action=argparse.BooleanOptionalAction, default=None,
                   help="give the repartition this package's code as a zip in its --py-files (default: on a "
                   "cluster, any master but local)")
    add_parallelism(p)
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    return {("rescale", None): cmd_rescale}


def cmd_rescale(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.core.errors import UsageError

    spec = read_spec(args.spec)
    if args.master or args.deploy_mode:
        spec = spec.derive(master=args.master or spec.master, deploy_mode=args.deploy_mode or spec.deploy_mode)
    if args.clone_name and not args.target:
        raise UsageError("--clone-name names a clone: give it with --target", hint="or leave --clone-name out")
    use_spec_connection(spec)
    from airflow_provider_streamstate.streams.rescale import rescale_spec

    result = rescale_spec(spec, args.partitions, snapshot=args.snapshot, target=args.target,
                          clone_name=args.clone_name, timeout_s=args.timeout, parallelism=args.parallelism,
                          ship_code=args.ship_code)
    where = "in place" if result.in_place else f"as a clone at {result.checkpoint}"
    snapshot = (f"snapshot {result.rescaled_snapshot}" if result.rescaled_snapshot else
                f"not snapshotted ({result.snapshot_error}: take one with `streamstate snapshot create`)")
    text = (f"rescaled {result.stream} {result.from_partitions} -> {result.to_partitions} state partitions {where}: "
            f"{snapshot} (from {result.source_snapshot}, repartition batch "
            f"{result.repartition_batch}, {sum(s['entries'] for s in result.stores)} entries verified)")
    if result.pinned:
        text += f"; {result.pinned} is pinned: restore it to roll back"
    print_result(args, result.to_json(), text)
    return EXIT_OK
