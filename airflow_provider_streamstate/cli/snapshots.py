"""`streamstate snapshot create|list|show`, `restore`, `verify` and `streams`: taking snapshots
and reading them back.

    streamstate snapshot create --checkpoint PATH --store STORE --stream NAME [--batch N] [--label K=V]... [--json]
    streamstate snapshot create --pipeline SPEC --store STORE --kafka-bootstrap HOST:PORT [--wait S] [--json]
    streamstate snapshot list   --store STORE --stream NAME [--json]
    streamstate snapshot show   --store STORE --stream NAME SNAPSHOT [--kafka-bootstrap HOST:PORT] [--json]
    streamstate restore         --store STORE --stream NAME SNAPSHOT --target DIR [--new-query-id] [--force] [--json]
    streamstate verify          --store STORE --stream NAME [SNAPSHOT] [--checkpoint CKPT] [--json]
    streamstate streams         --store STORE [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from airflow_provider_streamstate.cli.common import (
    EXIT_FAILURE,
    EXIT_OK,
    Handlers,
    Parser,
    add_kafka_options,
    add_parallelism,
    add_store_options,
    format_ms,
    human_bytes,
    kafka_config_from_args,
    open_store_from_args,
    print_result,
    progress_for,
)


def register(commands: Any) -> Handlers:
    snapshot = commands.add_parser("snapshot", help="create, list and show snapshots")
    snapshot.set_defaults(help_parser=snapshot)
    snap_cmds = snapshot.add_subparsers(dest="snapshot_command", metavar="SUBCOMMAND", parser_class=Parser)
    create = snap_cmds.add_parser("create", help="snapshot a checkpoint at a committed batch, or a pipeline at a cut")
    create.add_argument("--checkpoint", help="the stream's checkpoint location: a local path, file:// URI or s3a://bucket/path")
    add_store_options(create, stream=False)
    create.add_argument("--stream", help="the stream's name in the store")
    create.add_argument(
        "--pipeline", metavar="SPEC",
        help="a pipeline spec (JSON: name, members, links): snapshot every member at one consistent cut, "
        "with the link topics' channel records (needs --kafka-bootstrap; no --checkpoint or --stream)",
    )
    create.add_argument("--wait", type=float, default=120.0, metavar="SECONDS",
                        help="with --pipeline: how long to wait for each upstream to be between two batches")
    create.add_argument("--batch", type=int, default=None, metavar="N", help="committed batch (default: newest)")
    create.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", help="repeatable")
    create.add_argument(
        "--always", action="store_true",
        help="take a new snapshot even when the newest one of this timeline already holds the batch",
    )
    create.add_argument(
        "--new-timeline", action="store_true",
        help="accept a checkpoint of another query (a clone, a fresh start) as a new line of this stream's history",
    )
    create.add_argument("--spark-version", default=None, help="the stream's Spark version, recorded in the manifest")
    add_kafka_options(
        create, required=False,
        help="the cluster the stream reads: record the last record each partition's batch consumed "
        "(Kafka anchors), which `streamstate failover` needs to resume exactly on a mirrored cluster",
    )
    create.add_argument(
        "--check-blobs", action="store_true",
        help="ask the store for every blob the parent snapshot references, not only those its last "
        "garbage collection found lost (for a store damaged by hand since then)",
    )
    add_parallelism(create)
    lst = snap_cmds.add_parser("list", help="list a stream's snapshots, oldest first, with their timelines")
    add_store_options(lst)
    show = snap_cmds.add_parser("show", help="show one snapshot's manifest")
    add_store_options(show)
    show.add_argument("snapshot_id", metavar="SNAPSHOT", help="a snapshot id or `latest`")
    show.add_argument("--files", action="store_true", help="also list every file")
    add_kafka_options(
        show, required=False,
        help="also show each partition's earliest and latest offsets on these brokers next to the snapshot's",
    )

    streams = commands.add_parser("streams", help="list the streams a store holds snapshots of")
    add_store_options(streams, stream=False)

    restore = commands.add_parser("restore", help="materialise a snapshot as a checkpoint directory")
    add_store_options(restore)
    restore.add_argument("snapshot_id", metavar="SNAPSHOT", help="a snapshot id or `latest`")
    restore.add_argument("--target", required=True, help="directory to write the checkpoint into")
    restore.add_argument("--new-query-id", action="store_true", help="give the copy a fresh query id (a clone)")
    restore.add_argument("--force", action="store_true", help="replace the contents of a non-empty target")
    add_parallelism(restore)

    verify = commands.add_parser("verify", help="re-hash the blobs of one or all snapshots")
    add_store_options(verify)
    verify.add_argument("snapshot_id", nargs="?", metavar="SNAPSHOT", help="a snapshot id or `latest` (default: all)")
    verify.add_argument("--checkpoint", default=None, metavar="CKPT",
                        help="also check the stream's checkpoint: that Spark can start from it")
    add_parallelism(verify)
    return {
        ("snapshot", "create"): cmd_snapshot_create,
        ("snapshot", "list"): cmd_snapshot_list,
        ("snapshot", "show"): cmd_snapshot_show,
        ("streams", None): cmd_streams,
        ("restore", None): cmd_restore,
        ("verify", None): cmd_verify,
    }


def cmd_snapshot_create(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.core.errors import UsageError
    from airflow_provider_streamstate.engine.core.manifest import parse_labels
    from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot

    labels = parse_labels(args.label)
    if args.pipeline:
        return _create_pipeline_snapshot(args, labels)
    if not args.checkpoint or not args.stream:
        raise UsageError("snapshot create: --checkpoint and --stream are required (or --pipeline SPEC)",
                         hint="name the stream's checkpoint and its name in the store")
    result = create_snapshot(
        args.checkpoint, open_store_from_args(args), args.stream, batch_id=args.batch, labels=labels,
        parallelism=args.parallelism, progress=progress_for(args), always=args.always,
        new_timeline=args.new_timeline, spark_version=args.spark_version, kafka_bootstrap=args.kafka_bootstrap,
        kafka_config=kafka_config_from_args(args), check_blobs=args.check_blobs,
    )
    r = result.to_json()
    if result.reused:
        text = (
            f"snapshot {r['snapshot_id']} of {r['stream']} already holds batch {r['batch_id']} "
            "(nothing new was taken; --always takes another)"
        )
    else:
        text = (
            f"snapshot {r['snapshot_id']} of {r['stream']}: batch {r['batch_id']}, timeline {r['timeline']}, "
            f"{r['files']} files, {human_bytes(r['bytes_total'])}; uploaded {human_bytes(r['bytes_uploaded'])} "
            f"in {r['blobs_uploaded']} blobs, {r['seconds']:.2f}s"
        )
        if r["blobs_missing"]:
            text += f"; stored again {r['blobs_missing']} blob(s) the store had lost"
    print_result(args, r, text)
    return EXIT_OK


def _create_pipeline_snapshot(args: argparse.Namespace, labels: dict[str, str]) -> int:
    from airflow_provider_streamstate.engine.core.errors import UsageError
    from airflow_provider_streamstate.engine.pipeline.snapshots import create_pipeline_snapshot
    from airflow_provider_streamstate.engine.pipeline.spec import PipelineSpec

    given = [f"--{n}" for n in ("checkpoint", "stream", "batch") if getattr(args, n) is not None]
    if given:
        raise UsageError(f"--pipeline takes its members' checkpoints and names from the spec, not {', '.join(given)}",
                         hint="drop them, or snapshot one stream without --pipeline")
    if not args.kafka_bootstrap:
        raise UsageError("--pipeline needs --kafka-bootstrap", hint="give the cluster of the pipeline's link topics")
    result = create_pipeline_snapshot(PipelineSpec.load(args.pipeline), open_store_from_args(args), args.kafka_bootstrap,
                                      kafka_config=kafka_config_from_args(args), wait_s=args.wait, parallelism=args.parallelism, labels=labels)
    r = result.to_json()
    members = ", ".join(f"{s} batch {m['batch_id']} ({m['snapshot_id']})" for s, m in r["members"].items())
    channels = ", ".join(f"{c['topic']} {c['records']} record(s)" for c in r["channels"])
    print_result(args, r, f"pipeline snapshot {r['snapshot_id']} of {r['pipeline']}: {members}; channel: {channels}; "
                          f"{r['seconds']:.2f}s")
    return EXIT_OK


def _summary(m: Any, on_current: bool) -> dict[str, Any]:
    return {
        "snapshot_id": m.snapshot_id,
        "stream": m.stream,
        "batch_id": m.batch_id,
        "timeline": m.timeline,
        "on_current_timeline": on_current,
        "parent": m.parent,
        "created_at": m.created_at,
        "files": m.files,
        "bytes_total": m.bytes_total,
        "state_store": m.state_store,
        "kafka_offsets": m.kafka_offsets,
        "watermark_ms": m.watermark_ms,
        "labels": m.labels,
    }


def cmd_snapshot_list(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.catalog.index import list_summaries
    from airflow_provider_streamstate.engine.lifecycle.replicate import snapshot_origins

    store = open_store_from_args(args)
    listing = list_summaries(store, args.stream)  # through the catalog index: no manifest read twice
    origins = snapshot_origins(store, args.stream)  # where replicated snapshots came from
    rows = [{**_summary(m, listing.on_current_timeline(m)), "origin": origins.get(m.snapshot_id),
             "validations": listing.validations.get(m.snapshot_id, {})} for m in listing.snapshots]
    lines = [f"  {'SNAPSHOT_ID':39} {'TL':>3} {'BATCH':>7} {'CREATED':20} {'FILES':>6} {'SIZE':>10}  {'STATE':17} {'ORIGIN':24} LABELS  VALIDATIONS"]
    for r in rows:
        labels = ",".join(f"{k}={v}" for k, v in r["labels"].items())
        mark = " " if r["on_current_timeline"] else "x"
        checks = ",".join(f"{s}:{'ok' if ok else 'FAIL' if ok is False else 'unreadable'}"
                          for s, ok in sorted(r["validations"].items()))
        lines.append(
            f"{mark} {r['snapshot_id']:39} {r['timeline']:>3} {r['batch_id']:>7} {r['created_at'][:19]:20} "
            f"{r['files']:>6} {human_bytes(r['bytes_total']):>10}  {r['state_store']:17} {r['origin'] or '-':24} {labels or '-'}  {checks or '-'}"
        )
    abandoned = sum(1 for r in rows if not r["on_current_timeline"])
    if abandoned:
        lines.append(
            f"x: {abandoned} snapshot(s) of an abandoned timeline (history a rollback left behind); "
            f"the current timeline is {listing.timelines.current}"
        )
    print_result(args, rows, "\n".join(lines))
    return EXIT_OK


def cmd_snapshot_show(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.catalog.snapshots import resolve_snapshot

    m = resolve_snapshot(open_store_from_args(args), args.stream, args.snapshot_id)
    lines = [
        f"snapshot      {m.snapshot_id}",
        f"stream        {m.stream}",
        f"batch         {m.batch_id} (resumes with batch {m.batch_id + 1})",
        f"timeline      {m.timeline}",
        f"created       {m.created_at} by {m.created_by}",
        f"query id      {m.query_id}",
        f"parent        {m.parent or '-'}",
        f"watermark     {format_ms(m.watermark_ms)} (next {format_ms(m.next_watermark_ms)})",
        f"batch time    {format_ms(m.batch_timestamp_ms)}",
        f"state store   {m.state_store}" + (f", checkpoint format {m.checkpoint_format} "
                                               "(run a restored copy with checkpointFormatVersion="
                                               f"{m.checkpoint_format})" if m.checkpoint_format != 1 else ""),
        f"spark         {m.spark_version or '-'}",
        f"checkpoint    {m.checkpoint or '-'}",
        f"files         {len(m.files)} ({human_bytes(m.bytes_total)}, {len(m.blobs)} distinct blobs)",
        f"labels        {', '.join(f'{k}={v}' for k, v in m.labels.items()) or '-'}",
    ]
    data = m.to_dict()
    if args.kafka_bootstrap:
        from airflow_provider_streamstate.engine.kafka.offsets import broker_offsets

        parts = broker_offsets(args.kafka_bootstrap, m.kafka_offsets, config=kafka_config_from_args(args))
        data["broker_offsets"] = [p.to_json() for p in parts]
        lines.append(f"kafka offsets (snapshot / broker earliest..latest at {args.kafka_bootstrap})")
        for p in parts:
            state = "ok" if p.available else "GONE: retention deleted records the restore needs"
            if p.snapshot > p.latest:
                state = "AHEAD of the broker: another cluster, or the topic was recreated"
            lines.append(
                f"  {p.topic}[{p.partition}]: {p.snapshot} / {p.earliest}..{p.latest}  {p.behind} behind  {state}"
            )
    else:
        lines.append("kafka offsets")
        for topic, offsets in sorted(m.kafka_offsets.items()):
            lines.append(
                f"  {topic}: " + ", ".join(f"{p}={o}" for p, o in sorted(offsets.items(), key=lambda x: int(x[0])))
            )
    lines.append("operators")
    for op in m.operators:
        lines.append(
            f"  {op.operator_id}: {op.name}, {op.partitions} partitions, stores {','.join(op.stores)}, version {op.state_version}"
        )
        if op.state_variables:
            variables = ", ".join(f"{v['name']} ({v['kind']}{', TTL' if v['ttl'] else ''})"
                                  for v in op.state_variables if v["kind"] != "TimerState")
            timers = " and timers" if any(v["kind"] == "TimerState" for v in op.state_variables) else ""
            lines.append(f"     state variables ({op.time_mode or 'no'} time mode): {variables}{timers}")
    if not m.operators:
        lines.append("  none (a stateless query)")
    if args.files:
        lines.append("files")
        lines.extend(f"  {f.sha256[:12]} {f.size:>12} {f.path}" for f in m.files)
    print_result(args, data, "\n".join(lines))
    return EXIT_OK


def cmd_streams(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.catalog.snapshots import list_streams

    store = open_store_from_args(args)
    rows = [s.to_json() for s in list_streams(store)]
    if not rows and not args.json:
        print(f"no snapshots of any stream in {store.url}")
        return EXIT_OK
    lines = [f"{'STREAM':32} {'SNAPSHOTS':>9} {'TL':>3} {'SIZE':>10}  NEWEST"]
    for r in rows:
        lines.append(
            f"{r['stream']:32} {r['snapshots']:>9} {r['current_timeline']:>3} {human_bytes(r['bytes']):>10}  {r['newest'] or '-'}"
        )
    print_result(args, rows, "\n".join(lines))
    return EXIT_OK


def cmd_restore(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot

    result = restore_snapshot(
        open_store_from_args(args), args.stream, args.snapshot_id, args.target, force=args.force,
        new_query_id=args.new_query_id, parallelism=args.parallelism, progress=progress_for(args),
    )
    r = result.to_json()
    text = (
        f"restored {r['snapshot_id']} (batch {r['batch_id']}, {r['files']} files, {human_bytes(r['bytes'])}) "
        f"to {r['target']}; a query started on it resumes with batch {r['batch_id'] + 1}"
    )
    if r["clone"]:
        text += f"\nclone: new query id {r['query_id']}; snapshot it under its own --stream name"
    elif r["new_timeline"]:
        text += f"\nrollback: stream {r['stream']} continues on new timeline {r['timeline']}"
    print_result(args, r, text)
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.catalog.verify import verify_snapshots

    store = open_store_from_args(args)
    snapshot_id = args.snapshot_id
    if snapshot_id is not None:
        from airflow_provider_streamstate.engine.catalog.snapshots import resolve_snapshot

        snapshot_id = resolve_snapshot(store, args.stream, snapshot_id).snapshot_id
    elif not store.list_snapshot_ids(args.stream):
        from airflow_provider_streamstate.engine.catalog.snapshots import no_snapshots_error

        raise no_snapshots_error(store, args.stream)  # verifying nothing must not pass
    result = verify_snapshots(store, args.stream, snapshot_id, parallelism=args.parallelism, progress=progress_for(args))
    r = result.to_json()
    problem = _checkpoint_problem(args.checkpoint) if args.checkpoint else None
    if args.checkpoint:
        r["checkpoint"] = {"location": args.checkpoint, "problem": problem}
    if args.json:
        print(json.dumps(r))
    elif result.ok and problem is None:
        print(
            f"ok: {len(result.snapshots)} snapshot(s) of {result.stream}, {result.blobs_checked} blobs, "
            f"{human_bytes(result.bytes_checked)} verified" + (f"; checkpoint {args.checkpoint} ok" if args.checkpoint
                                                               else "")
        )
    if not result.ok:
        print(f"streamstate: error: {result.summary()}", file=sys.stderr)
        return EXIT_FAILURE
    if problem is not None:
        print(f"streamstate: error: checkpoint {args.checkpoint}: {problem}; restore its newest good snapshot "
              "(docs/runbooks/rescale.md)", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK


def _checkpoint_problem(location: str) -> str | None:
    """Why Spark would not start a query on the checkpoint, as far as its logs tell (None: fine)."""
    from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
    from airflow_provider_streamstate.engine.checkpoint.repartition import unfinished_repartition

    unfinished = unfinished_repartition(CheckpointReader(location))
    return unfinished.describe() if unfinished is not None else None
