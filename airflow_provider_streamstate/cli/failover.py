"""`streamstate failover`: resume a stream in the DR region from a replicated snapshot, its
Kafka offsets translated exactly for the mirrored cluster (engine/dr/failover.py).

    streamstate failover --store DR_STORE --stream X [SNAPSHOT] (--target DIR | --standby LOCATION)
                         --kafka-bootstrap DR_BOOTSTRAP [--topic-map SRC=DST]...
                         [--replication-policy default|identity --source-alias NAME]
                         [--suite NAME] [--verify-standby checksums|full] [--json]

With `--standby`, the target is the warm standby kept by `replicate --standby` (engine/dr/standby.py):
promoted in place when it holds the chosen snapshot and verifies, else restored over (the report says why).
"""

from __future__ import annotations

import argparse
from typing import Any

from airflow_provider_streamstate.cli.common import (
    EXIT_OK,
    Handlers,
    add_kafka_options,
    add_mirror_options,
    add_parallelism,
    add_store_options,
    kafka_config_from_args,
    open_store_from_args,
    print_result,
)


def register(commands: Any) -> Handlers:

    p = commands.add_parser(
        "failover", help="restore a snapshot for a mirrored Kafka cluster, offsets translated exactly")
    add_store_options(p)
    p.add_argument("snapshot_id", nargs="?", default=None, metavar="SNAPSHOT",
                   help="a snapshot id or `latest` (default: the newest one that translates exactly)")
    p.add_argument("--target", default=None,
                   help="the stream's DR checkpoint: a new or empty directory, or an empty s3a://bucket/path")
    p.add_argument("--standby", default=None, metavar="LOCATION",
                   help="the stream's DR checkpoint is this warm standby (`replicate --standby`): promoted when it "
                        "holds the chosen snapshot and verifies, else the snapshot is restored over it")
    p.add_argument("--verify-standby", choices=("checksums", "full"), default="checksums",
                   help="how the standby is verified: each file's sha256 as recorded when it was written, trusted "
                        "while the filesystem gives it the same version (default), or every byte read")
    add_kafka_options(p, required=True, help="the DR Kafka cluster")
    add_mirror_options(p)
    p.add_argument("--suite", default=None, help="only snapshots that passed this validation suite")
    p.add_argument("--wait-mirror", type=float, default=0.0, metavar="SECONDS",
                   help="with SNAPSHOT: wait up to this long for the mirror to hold its last records "
                        "(a failback's final snapshot) instead of refusing")
    add_parallelism(p)
    return {("failover", None): cmd_failover}


def cmd_failover(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.dr.failover import TopicMap, failover

    target = _target(args)
    topic_map = TopicMap.parse(args.topic_map, args.replication_policy, args.source_alias)
    r = failover(open_store_from_args(args), args.stream, target, args.kafka_bootstrap, snapshot=args.snapshot_id,
                 topic_map=topic_map, suite=args.suite, parallelism=args.parallelism,
                 kafka_config=kafka_config_from_args(args),
                 mirror_wait_s=max(0.0, args.wait_mirror), standby=args.standby is not None,
                 verify_standby=args.verify_standby)
    lines = [f"failed over {r.stream} to {r.target}: snapshot {r.snapshot_id} (batch {r.batch_id}); "
             f"the stream resumes with batch {r.batch_id + 1}, {r.events_behind} record(s) to catch up"]
    if r.standby is not None and r.standby.usable:
        lines.append(f"  promoted the warm standby: {r.standby.files} files verified ({r.standby.files_trusted} by "
                     f"version, {r.standby.files_by_checksum} by stored checksum, {r.standby.files_read} read), "
                     f"{len(r.rewritten)} rewritten")
    elif r.standby is not None:
        lines.append(f"  the warm standby was not used ({r.standby.reason}): the snapshot was restored over it")
    for p in r.translated:
        lines.append(f"  {p.topic}[{p.partition}] {p.primary_offset} -> {p.dr_topic}[{p.partition}] {p.dr_offset}")
    for sid, reason in r.skipped_snapshots:
        lines.append(f"  skipped {sid}: {reason}")
    print_result(args, r.to_json(), "\n".join(lines))
    return EXIT_OK


def _target(args: argparse.Namespace) -> str:
    """The checkpoint to fail over into: `--target`, or the `--standby` (the same location when both are given)."""
    from airflow_provider_streamstate.engine.checkpoint.filesystems import open_checkpoint_fs
    from airflow_provider_streamstate.engine.core.errors import UsageError

    if args.standby is None:
        if args.target is None:
            raise UsageError("failover needs --target or --standby",
                             hint="give the stream's DR checkpoint: --target DIR (new or empty), or --standby LOCATION")
        return str(args.target)
    if args.target is not None and open_checkpoint_fs(args.target).location != open_checkpoint_fs(
            args.standby).location:
        raise UsageError(f"--target {args.target} is not the standby {args.standby}",
                         hint="with --standby the stream resumes on the standby itself: drop --target")
    return str(args.standby)
