"""The `streamstate` command: the engine for people at a terminal and for scripts.

    streamstate snapshot create --checkpoint PATH --store STORE --stream NAME [--batch N] [--label K=V]... [--json]
    streamstate snapshot list   --store STORE --stream NAME [--json]
    streamstate snapshot show   --store STORE --stream NAME SNAPSHOT [--kafka-bootstrap HOST:PORT] [--json]
    streamstate restore         --store STORE --stream NAME SNAPSHOT --target DIR [--new-query-id] [--force] [--json]
    streamstate verify          --store STORE --stream NAME [SNAPSHOT] [--json]
    streamstate streams         --store STORE [--json]

SNAPSHOT is a snapshot id or `latest` (the newest on the stream's current timeline).
Exit codes: 0 success; 1 failure, with one line on stderr saying what is wrong and what
to do; 2 usage error; 130 interrupted. `--debug` shows the traceback of a failure,
`--verbose` what the engine does. S3 stores take their endpoint and credentials from the
standard AWS environment variables (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION, AWS_PROFILE) or an Airflow connection.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

from airflow_provider_streamstate import __version__

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


class TerminalProgress:
    """A one-line progress bar on stderr, redrawn at most 10 times a second."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.lock = threading.Lock()
        self.phase, self.total, self.done, self.files, self.last = "", 0, 0, 0, 0.0

    def start(self, phase: str, total_files: int, total_bytes: int) -> None:
        with self.lock:
            self.phase, self.total, self.done, self.files, self.last = phase, total_bytes, 0, total_files, 0.0

    def advance(self, nbytes: int) -> None:
        with self.lock:
            self.done += nbytes
            now = time.monotonic()
            if now - self.last >= 0.1:
                self.last = now
                self._draw()

    def _draw(self) -> None:
        if not self.total:
            return
        frac = min(1.0, self.done / self.total)
        bar = "#" * int(frac * 30)
        self.stream.write(
            f"\r{self.phase:8} [{bar:<30}] {frac * 100:5.1f}%  {human_bytes(self.done)} / {human_bytes(self.total)} ({self.files} files)"
        )
        self.stream.flush()

    def finish(self) -> None:
        with self.lock:
            if self.total and self.last:
                self.done = self.total
                self._draw()
                self.stream.write("\n")
                self.stream.flush()


class UsageFailure(Exception):
    """Raised by the parser instead of exiting, so main() owns every exit path."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageFailure(f"{self.prog}: {message}")


def _common(p: argparse.ArgumentParser, *, stream: bool = True) -> None:
    p.add_argument("--store", required=True, help="file:///abs/path, /abs/path or s3://bucket/prefix")
    p.add_argument(
        "--aws-conn-id",
        metavar="CONN",
        default=None,
        help="for s3:// stores: take endpoint and credentials from this Airflow AWS connection "
        "(AIRFLOW_CONN_<CONN> or Airflow's secrets backend) instead of the AWS_* variables",
    )
    if stream:
        p.add_argument("--stream", required=True, help="the stream's name in the store")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")


def _parallelism(p: argparse.ArgumentParser) -> None:
    p.add_argument("--parallelism", type=int, default=8, metavar="N", help="concurrent file transfers (default 8)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="streamstate",
        description="Consistent snapshots, restore and verification of Spark Structured Streaming state.",
    )
    parser.add_argument("--version", action="version", version=f"streamstate {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of failures")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what the engine does on stderr")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    snapshot = commands.add_parser("snapshot", help="create, list and show snapshots")
    snapshot.set_defaults(help_parser=snapshot)
    snap_cmds = snapshot.add_subparsers(dest="snapshot_command", metavar="SUBCOMMAND", parser_class=_Parser)
    create = snap_cmds.add_parser("create", help="snapshot a checkpoint at a committed batch")
    create.add_argument("--checkpoint", required=True, help="the stream's checkpoint location: a local path, file:// URI or s3a://bucket/path")
    _common(create)
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
    create.add_argument(
        "--kafka-bootstrap", metavar="HOST:PORT",
        help="the cluster the stream reads: record the last record each partition's batch consumed "
        "(Kafka anchors), which `streamstate failover` needs to resume exactly on a mirrored cluster",
    )
    _parallelism(create)
    lst = snap_cmds.add_parser("list", help="list a stream's snapshots, oldest first, with their timelines")
    _common(lst)
    show = snap_cmds.add_parser("show", help="show one snapshot's manifest")
    _common(show)
    show.add_argument("snapshot_id", metavar="SNAPSHOT", help="a snapshot id or `latest`")
    show.add_argument("--files", action="store_true", help="also list every file")
    show.add_argument(
        "--kafka-bootstrap", metavar="HOST:PORT",
        help="also show each partition's earliest and latest offsets on these brokers next to the snapshot's",
    )

    streams = commands.add_parser("streams", help="list the streams a store holds snapshots of")
    _common(streams, stream=False)

    restore = commands.add_parser("restore", help="materialise a snapshot as a checkpoint directory")
    _common(restore)
    restore.add_argument("snapshot_id", metavar="SNAPSHOT", help="a snapshot id or `latest`")
    restore.add_argument("--target", required=True, help="directory to write the checkpoint into")
    restore.add_argument("--new-query-id", action="store_true", help="give the copy a fresh query id (a clone)")
    restore.add_argument("--force", action="store_true", help="replace the contents of a non-empty target")
    _parallelism(restore)

    verify = commands.add_parser("verify", help="re-hash the blobs of one or all snapshots")
    _common(verify)
    verify.add_argument("snapshot_id", nargs="?", metavar="SNAPSHOT", help="a snapshot id or `latest` (default: all)")
    _parallelism(verify)
    for name in COMMAND_MODULES:
        COMMANDS.update(importlib.import_module(name).register(commands))
    return parser


def _out(args: argparse.Namespace, data: Any, text: str) -> None:
    if args.json:
        print(json.dumps(data, indent=None, sort_keys=False))
    else:
        print(text)


def _progress(args: argparse.Namespace) -> Any:
    return TerminalProgress(sys.stderr) if not args.json and sys.stderr.isatty() else None


def _store(args: argparse.Namespace) -> Any:
    import contextlib
    import os

    from airflow_provider_streamstate.engine.core.errors import UsageError
    from airflow_provider_streamstate.engine.stores import open_store

    parallelism = getattr(args, "parallelism", 8)
    conn_id = getattr(args, "aws_conn_id", None)
    if not conn_id:
        return open_store(args.store, parallelism=parallelism)
    # Airflow configures its logging at import, onto the stdout it finds then: send it to
    # stderr, warnings only, so `--json` output stays one document.
    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")
    with contextlib.redirect_stdout(sys.stderr):
        try:
            from airflow_provider_streamstate.hooks.store import StreamstateStoreHook
        except ImportError as exc:
            raise UsageError(
                f"--aws-conn-id needs Airflow and its amazon provider: {exc}",
                hint="install apache-airflow-providers-amazon, or configure S3 with the AWS_* environment variables",
            ) from None
        return StreamstateStoreHook(args.store, aws_conn_id=conn_id, parallelism=parallelism).store


def _fmt_ms(ms: int | None) -> str:
    if ms is None or ms <= 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def cmd_snapshot_create(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.core.manifest import parse_labels
    from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot

    labels = parse_labels(args.label)
    result = create_snapshot(
        args.checkpoint, _store(args), args.stream, batch_id=args.batch, labels=labels,
        parallelism=args.parallelism, progress=_progress(args), always=args.always,
        new_timeline=args.new_timeline, spark_version=args.spark_version, kafka_bootstrap=args.kafka_bootstrap,
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
    _out(args, r, text)
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
        "files": len(m.files),
        "bytes_total": m.bytes_total,
        "state_store": m.state_store,
        "kafka_offsets": m.kafka_offsets,
        "watermark_ms": m.watermark_ms,
        "labels": m.labels,
    }


def cmd_snapshot_list(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.catalog.snapshots import list_snapshots
    from airflow_provider_streamstate.engine.catalog.validation_records import validation_status
    from airflow_provider_streamstate.engine.lifecycle.replicate import snapshot_origins

    store = _store(args)
    listing = list_snapshots(store, args.stream)
    origins = snapshot_origins(store, args.stream)  # where replicated snapshots came from
    status = validation_status(store, args.stream, [m.snapshot_id for m in listing.manifests])  # {snapshot: {suite: passed; None: unreadable}}
    rows = [{**_summary(m, listing.on_current_timeline(m)), "origin": origins.get(m.snapshot_id),
             "validations": status.get(m.snapshot_id, {})} for m in listing.manifests]
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
    _out(args, rows, "\n".join(lines))
    return EXIT_OK


def cmd_snapshot_show(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.catalog.snapshots import resolve_snapshot

    m = resolve_snapshot(_store(args), args.stream, args.snapshot_id)
    lines = [
        f"snapshot      {m.snapshot_id}",
        f"stream        {m.stream}",
        f"batch         {m.batch_id} (resumes with batch {m.batch_id + 1})",
        f"timeline      {m.timeline}",
        f"created       {m.created_at} by {m.created_by}",
        f"query id      {m.query_id}",
        f"parent        {m.parent or '-'}",
        f"watermark     {_fmt_ms(m.watermark_ms)} (next {_fmt_ms(m.next_watermark_ms)})",
        f"batch time    {_fmt_ms(m.batch_timestamp_ms)}",
        f"state store   {m.state_store}",
        f"spark         {m.spark_version or '-'}",
        f"checkpoint    {m.checkpoint or '-'}",
        f"files         {len(m.files)} ({human_bytes(m.bytes_total)}, {len(m.blobs)} distinct blobs)",
        f"labels        {', '.join(f'{k}={v}' for k, v in m.labels.items()) or '-'}",
    ]
    data = m.to_dict()
    if args.kafka_bootstrap:
        from airflow_provider_streamstate.engine.kafka.offsets import broker_offsets

        parts = broker_offsets(args.kafka_bootstrap, m.kafka_offsets)
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
    if not m.operators:
        lines.append("  none (a stateless query)")
    if args.files:
        lines.append("files")
        lines.extend(f"  {f.sha256[:12]} {f.size:>12} {f.path}" for f in m.files)
    _out(args, data, "\n".join(lines))
    return EXIT_OK


def cmd_streams(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.catalog.snapshots import list_streams

    store = _store(args)
    rows = [s.to_json() for s in list_streams(store)]
    if not rows and not args.json:
        print(f"no snapshots of any stream in {store.url}")
        return EXIT_OK
    lines = [f"{'STREAM':32} {'SNAPSHOTS':>9} {'TL':>3} {'SIZE':>10}  NEWEST"]
    for r in rows:
        lines.append(
            f"{r['stream']:32} {r['snapshots']:>9} {r['current_timeline']:>3} {human_bytes(r['bytes']):>10}  {r['newest'] or '-'}"
        )
    _out(args, rows, "\n".join(lines))
    return EXIT_OK


def cmd_restore(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot

    result = restore_snapshot(
        _store(args), args.stream, args.snapshot_id, args.target, force=args.force,
        new_query_id=args.new_query_id, parallelism=args.parallelism, progress=_progress(args),
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
    _out(args, r, text)
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.catalog.verify import verify_snapshots

    store = _store(args)
    snapshot_id = args.snapshot_id
    if snapshot_id is not None:
        from airflow_provider_streamstate.engine.catalog.snapshots import resolve_snapshot

        snapshot_id = resolve_snapshot(store, args.stream, snapshot_id).snapshot_id
    elif not store.list_snapshot_ids(args.stream):
        from airflow_provider_streamstate.engine.catalog.snapshots import no_snapshots_error

        raise no_snapshots_error(store, args.stream)  # verifying nothing must not pass
    result = verify_snapshots(store, args.stream, snapshot_id, parallelism=args.parallelism, progress=_progress(args))
    r = result.to_json()
    if args.json:
        print(json.dumps(r))
    elif result.ok:
        print(
            f"ok: {len(result.snapshots)} snapshot(s) of {result.stream}, {result.blobs_checked} blobs, "
            f"{human_bytes(result.bytes_checked)} verified"
        )
    if not result.ok:
        print(f"streamstate: error: {result.summary()}", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK


# Command groups that live in their own modules (one concept, one module). Each module has
# `register(commands) -> {(command, subcommand or None): handler}`; it adds its parsers to
# `commands` (subcommands with dest="subcommand") and may use this module's helpers
# (`_common`, `_parallelism`, `_out`, `_store`...).
COMMAND_MODULES: tuple[str, ...] = ("airflow_provider_streamstate.cli_retention", "airflow_provider_streamstate.cli_gc", "airflow_provider_streamstate.cli_clone", "airflow_provider_streamstate.cli_replicate", "airflow_provider_streamstate.cli_state", "airflow_provider_streamstate.cli_failover")

COMMANDS: dict[tuple[str, str | None], Callable[[argparse.Namespace], int]] = {
    ("snapshot", "create"): cmd_snapshot_create,
    ("snapshot", "list"): cmd_snapshot_list,
    ("snapshot", "show"): cmd_snapshot_show,
    ("streams", None): cmd_streams,
    ("restore", None): cmd_restore,
    ("verify", None): cmd_verify,
}


def _configure_logging(verbose: bool) -> None:
    """The engine logs to the `streamstate` logger hierarchy; --verbose shows it on stderr."""
    logger = logging.getLogger("streamstate")
    if logger.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    if verbose:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.setLevel(logging.INFO)
    else:  # warnings only, in the CLI's own voice (not Python's bare last-resort handler)
        handler.setFormatter(logging.Formatter("streamstate: warning: %(message)s"))
        handler.setLevel(logging.WARNING)
    logger.addHandler(handler)


def main(argv: Sequence[str] | None = None) -> int:
    from airflow_provider_streamstate.engine.core.errors import StreamstateError, UsageError

    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageFailure as exc:
        print(f"{exc}; see `streamstate --help`", file=sys.stderr)
        return EXIT_USAGE
    key = (args.command, getattr(args, "snapshot_command", None) or getattr(args, "subcommand", None))
    handler = COMMANDS.get(key)
    if handler is None:  # a command group without its subcommand
        getattr(args, "help_parser", parser).print_help(sys.stderr)
        return EXIT_USAGE
    _configure_logging(args.verbose)
    if getattr(args, "parallelism", 1) < 1:
        print("streamstate: error: --parallelism must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    try:
        return handler(args)
    except StreamstateError as exc:
        if args.debug:
            raise
        print(f"streamstate: error: {exc.one_line()}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, UsageError) else EXIT_FAILURE
    except KeyboardInterrupt:
        print("streamstate: interrupted; nothing was published", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `streamstate ... | head`: the reader left; say nothing more
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except Exception as exc:  # noqa: BLE001 - the CLI owns the last line of defence
        if args.debug:
            raise
        print(
            f"streamstate: error: unexpected {type(exc).__name__}: {exc}; rerun with --debug for a traceback",
            file=sys.stderr,
        )
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
