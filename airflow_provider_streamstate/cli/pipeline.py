"""`streamstate pipeline list|show|restore|clone`: pipeline snapshots (taken with
`snapshot create --pipeline SPEC`), and bringing a pipeline back as one.

    streamstate pipeline list    --store S --pipeline NAME [--json]
    streamstate pipeline show    --store S --pipeline NAME SNAPSHOT [--json]
    streamstate pipeline validate --store S --pipeline NAME SNAPSHOT --suite MEMBER=FILE... [--json]
                                 [--master URL | --spark-conn-id CONN] [--deploy-mode client|cluster] [--conf K=V]...
    streamstate pipeline restore --store S --pipeline NAME SNAPSHOT --kafka-bootstrap HOST:PORT [--kafka-config FILE] [--json]
    streamstate pipeline clone   --store S --pipeline NAME SNAPSHOT --kafka-bootstrap HOST:PORT [--kafka-config FILE]
                                 --suffix SFX --checkpoint MEMBER=LOCATION... [--topic LINK=NEW]... [--ttl 7d] [--json]
    streamstate pipeline failover --store DR_STORE --pipeline NAME [SNAPSHOT] --kafka-bootstrap DR_HOST:PORT
                                 [--kafka-config FILE] --target MEMBER=LOCATION... [--link-topic LINK=DR_TOPIC]...
                                 [--topic-map SRC=DST]... [--replication-policy default|identity --source-alias NAME]
                                 [--good-only] [--json]

SNAPSHOT is a pipeline snapshot id, `latest`, or `latest-good` (every member passed its validations).
`validate` exits 0 when every member's suite passes and 3 when one fails. `list` marks a
snapshot GOOD `yes` when every member has passed all its recorded validations, `NO` when
one failed or is not validated yet, `-` when none is. `restore` replaces every member's checkpoint
(all stopped) and appends each link's channel records to its topic; `clone` restores the
members as new streams (`<member>-<SFX>`) onto new link topics (`<link>-<SFX>` unless given).
`failover` resumes every member in the DR region from one pipeline snapshot: source topics
translated through the mirror as `streamstate failover` does, each link's channel appended
to the DR link topic (its own name unless `--link-topic` maps it) and the downstream
resuming there; without SNAPSHOT, the newest one whose every member translates.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow_provider_streamstate.cli.common import (
    EXIT_OK,
    Handlers,
    Parser,
    add_kafka_options,
    add_mirror_options,
    add_parallelism,
    add_store_options,
    duration,
    kafka_config_from_args,
    open_store_from_args,
    print_result,
)
from airflow_provider_streamstate.cli.state_jobs import StateJobs, add_job_options, submitted

EXIT_VALIDATION_FAILED = 3  # as `streamstate validate`: a member's suite failed


def register(commands: Any) -> Handlers:
    pipeline = commands.add_parser("pipeline", help="list, show, restore and clone pipeline snapshots")
    pipeline.set_defaults(help_parser=pipeline)
    sub = pipeline.add_subparsers(dest="subcommand", metavar="SUBCOMMAND", parser_class=Parser)
    parsers = {}
    for name, text in (("list", "the pipeline's snapshots, oldest first"), ("show", "one pipeline snapshot"),
                       ("validate", "run each member's GX suite on its snapshot (here, or on --master)"),
                       ("restore", "restore every member in place, the channels appended to the link topics"),
                       ("clone", "restore the members as new streams on new link topics"),
                       ("failover", "resume every member in the DR region from one pipeline snapshot")):
        p = sub.add_parser(name, help=text)
        add_store_options(p, stream=False)
        p.add_argument("--pipeline", required=True, metavar="NAME", help="the pipeline's name (its spec's)")
        if name == "failover":
            p.add_argument("snapshot_id", nargs="?", default=None, metavar="SNAPSHOT",
                           help="a pipeline snapshot id, `latest` or `latest-good` "
                                "(default: the newest one whose every member translates exactly)")
        elif name != "list":
            p.add_argument("snapshot_id", metavar="SNAPSHOT", help="a pipeline snapshot id or `latest`")
        parsers[name] = p
    for name in ("restore", "clone", "failover"):
        p = parsers[name]
        add_kafka_options(p, required=True, help="the DR Kafka cluster" if name == "failover"
                          else "the link topics' cluster")
        add_parallelism(p)
    fail = parsers["failover"]
    fail.add_argument("--target", action="append", default=[], metavar="MEMBER=LOCATION", required=True,
                      help="each member's DR checkpoint: a new or empty directory or s3a:// location (one per member)")
    fail.add_argument("--link-topic", action="append", default=[], metavar="LINK=DR_TOPIC",
                      help="the DR topic a link's upstream writes there (default: the link's own name)")
    add_mirror_options(fail, topics="a source topic")
    fail.add_argument("--good-only", action="store_true",
                      help="without SNAPSHOT: only pipeline snapshots whose every member passed its validations")
    parsers["validate"].add_argument("--suite", action="append", default=[], metavar="MEMBER=FILE", required=True,
                                     help="a GX suite JSON file for each member (one per member)")
    add_job_options(parsers["validate"])
    clone = parsers["clone"]
    clone.add_argument("--suffix", required=True, help="names the clone: its members are `<member>-SUFFIX`, its link topics `<link>-SUFFIX` unless given")
    clone.add_argument("--checkpoint", action="append", default=[], metavar="MEMBER=LOCATION", required=True,
                       help="where each member's clone checkpoint goes (one per member)")
    clone.add_argument("--topic", action="append", default=[], metavar="LINK=NEW",
                       help="the clone's topic for a link (default: the link's name with the suffix)")
    clone.add_argument("--ttl", type=duration, default=None, metavar="DURATION",
                       help="record the members as clones expiring after this long (e.g. 7d): "
                       "`clone expire` then deletes them and their link topics")
    return {("pipeline", "list"): cmd_list, ("pipeline", "show"): cmd_show, ("pipeline", "restore"): cmd_restore,
            ("pipeline", "clone"): cmd_clone, ("pipeline", "validate"): cmd_validate,
            ("pipeline", "failover"): cmd_failover}


def _pairs(items: list[str], what: str) -> dict[str, str]:
    from airflow_provider_streamstate.engine.core.errors import UsageError

    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise UsageError(f"invalid {what} {item!r}", hint=f"write {what.upper()}=VALUE")
        out[key] = value
    return out


def cmd_list(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.pipeline.snapshots import (
        get_pipeline_snapshot,
        known_good,
        list_pipeline_snapshots,
        member_validations,
    )

    store = open_store_from_args(args)
    rows: list[dict[str, Any]] = []
    for sid in list_pipeline_snapshots(store, args.pipeline):
        snap = get_pipeline_snapshot(store, args.pipeline, sid)
        validations = member_validations(store, snap)
        good = known_good(validations) if any(validations.values()) else None
        rows.append({"snapshot_id": sid, "members": {s: m.to_json() for s, m in snap.members.items()},
                     "channel_records": {c.range.topic: c.records for c in snap.channels},
                     "validations": validations, "good": good})
    lines = [f"{'SNAPSHOT':24} {'GOOD':5} MEMBERS (batch, snapshot)  CHANNEL"]
    for r in rows:
        members = "  ".join(f"{s}@{m['batch_id']} {m['snapshot_id']}" for s, m in sorted(r["members"].items()))
        channel = ", ".join(f"{t}={n}" for t, n in r["channel_records"].items())
        mark = {True: "yes", False: "NO", None: "-"}[r["good"]]
        lines.append(f"{r['snapshot_id']:24} {mark:5} {members}  {channel}")
    print_result(args, rows, "\n".join(lines) if rows else f"pipeline {args.pipeline} has no snapshot")
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.pipeline.snapshots import get_pipeline_snapshot

    snap = get_pipeline_snapshot(open_store_from_args(args), args.pipeline, args.snapshot_id)
    d = snap.to_json()
    lines = [f"pipeline snapshot {snap.snapshot_id} of {snap.pipeline} (cut in {snap.cut_seconds:.2f}s)"]
    for s, m in snap.members.items():
        lines.append(f"  {s}: batch {m.batch_id}, snapshot {m.snapshot_id}, checkpoint {snap.spec.members[s]}")
    for c in snap.channels:
        ranges = ", ".join(f"[{p}] {c.range.start[p]}..{c.range.end[p]}" for p in sorted(c.range.end, key=int))
        lines.append(f"  {c.range.upstream} -> {c.range.topic} -> {c.range.downstream}: {c.records} channel record(s) "
                     f"{ranges}")
    print_result(args, d, "\n".join(lines))
    return EXIT_OK


def cmd_restore(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.pipeline.restore import restore_pipeline
    from airflow_provider_streamstate.engine.pipeline.snapshots import get_pipeline_snapshot

    store = open_store_from_args(args)
    snap = get_pipeline_snapshot(store, args.pipeline, args.snapshot_id)
    r = restore_pipeline(store, snap, args.kafka_bootstrap, kafka_config=kafka_config_from_args(args),
                         parallelism=args.parallelism)
    print_result(args, r.to_json(), _text(r, "restored"))
    return EXIT_OK


def cmd_clone(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.pipeline.restore import PipelineClone, restore_pipeline
    from airflow_provider_streamstate.engine.pipeline.snapshots import get_pipeline_snapshot

    store = open_store_from_args(args)
    snap = get_pipeline_snapshot(store, args.pipeline, args.snapshot_id)
    topics = {c.range.topic: f"{c.range.topic}-{args.suffix}" for c in snap.channels}
    topics.update(_pairs(args.topic, "link"))
    expires = None if args.ttl is None else (datetime.now(UTC) + timedelta(seconds=args.ttl)).isoformat()
    clone = PipelineClone({s: f"{s}-{args.suffix}" for s in snap.members}, _pairs(args.checkpoint, "member"), topics,
                          expires_at=expires)
    r = restore_pipeline(store, snap, args.kafka_bootstrap, clone=clone, kafka_config=kafka_config_from_args(args),
                         parallelism=args.parallelism)
    print_result(args, r.to_json(), _text(r, "cloned"))
    return EXIT_OK


def cmd_failover(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.dr.failover import TopicMap
    from airflow_provider_streamstate.engine.pipeline.failover import failover_pipeline

    topic_map = TopicMap.parse(args.topic_map, args.replication_policy, args.source_alias)
    r = failover_pipeline(open_store_from_args(args), args.pipeline, _pairs(args.target, "member"), args.kafka_bootstrap,
                          snapshot=args.snapshot_id, topic_map=topic_map, link_topics=_pairs(args.link_topic, "link"),
                          good_only=args.good_only, kafka_config=kafka_config_from_args(args),
                          parallelism=args.parallelism)
    lines = [f"failed over pipeline {r.pipeline} at {r.snapshot_id} in {r.seconds:.2f}s"]
    for s, m in r.members.items():
        lines.append(f"  {s}: {m.target}, resumes with batch {m.batch_id + 1}, "
                     f"{m.events_behind} source record(s) to catch up")
        lines += [f"    {p.topic}[{p.partition}] {p.primary_offset} -> {p.dr_topic}[{p.partition}] {p.dr_offset}"
                  for p in m.translated]
    lines += [f"  {t}: {n} channel record(s) appended; the downstream resumes there" for t, n in r.channel_records.items()]
    lines += [f"  skipped {sid}: {reason}" for sid, reason in r.skipped_snapshots]
    print_result(args, r.to_json(), "\n".join(lines))
    return EXIT_OK


def _text(r: Any, verb: str) -> str:
    lines = [f"{verb} pipeline {r.pipeline} at {r.snapshot_id} in {r.seconds:.2f}s"]
    lines += [f"  {s}: {ck}" for s, ck in r.checkpoints.items()]
    lines += [f"  {t}: {r.channel_records[t]} channel record(s) appended; the downstream resumes at "
              + ", ".join(f"[{p}] {o}" for p, o in sorted(parts.items(), key=lambda x: int(x[0])))
              for t, parts in r.resume.items()]
    return "\n".join(lines)


def cmd_validate(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.pipeline.snapshots import get_pipeline_snapshot
    from airflow_provider_streamstate.engine.pipeline.validation import validate_pipeline
    from airflow_provider_streamstate.engine.state.validation import load_suite

    suites = {member: load_suite(path, check=not submitted(args))  # a bad suite fails before Spark starts
              for member, path in _pairs(args.suite, "member").items()}
    with StateJobs(args) as jobs:
        snap = get_pipeline_snapshot(jobs.store, args.pipeline, args.snapshot_id)
        result = validate_pipeline(snap, suites, args.store, jobs.run)
    lines = [f"pipeline snapshot {result.snapshot_id} of {result.pipeline}: "
             f"{'PASSED' if result.success else 'FAILED'}"]
    lines += [f"  {s}: {m['snapshot_id']} suite {m['suite']} {'passed' if m['success'] else 'FAILED'}"
              + (" (stored result)" if m["reused"] else "") for s, m in result.members.items()]
    print_result(args, result.to_json(), "\n".join(lines))
    return EXIT_OK if result.success else EXIT_VALIDATION_FAILED
