"""`streamstate state show|export`, `diff`, `validate`, `bisect`: a snapshot's state as a
table, two states compared, a Great Expectations suite run on it, history bisected.

    streamstate state show   --store S --stream X SNAPSHOT [--operator ID|NAME] [--store-name N]
                             [--join-side left|right] [--where SQL] [--limit K] [--json]
    streamstate state export --store S --stream X SNAPSHOT [--operator ...] --format parquet|csv|jsonl --output PATH
    streamstate diff         --store S --stream X SNAPSHOT_A SNAPSHOT_B [--other-stream Y] [--operator ...] [--json]
    streamstate validate     --store S --stream X SNAPSHOT --suite FILE [--operator ...] [--data-docs DIR] [--json]
    streamstate bisect       --store S --stream X --suite FILE [--good SNAPSHOT] [--bad SNAPSHOT] [--operator ...] [--json]

SNAPSHOT is an id, `latest` or `latest-good:<suite>`. Each command starts one local Spark
session (a few seconds) and removes the snapshots it materialised when it ends.
`validate` exits 0 when the suite passes and 3 when it fails; errors exit 1 (2 for usage).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import uuid
from pathlib import Path
from typing import Any

from airflow_provider_streamstate.cli.common import (
    EXIT_OK,
    EXIT_USAGE,
    Handlers,
    Parser,
    add_store_options,
    open_store_from_args,
    print_result,
)

EXIT_VALIDATION_FAILED = 3
EXPORT_FORMATS = ("parquet", "csv", "jsonl")


def _selector_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--operator", default=None, metavar="ID|NAME",
                   help="stateful operator by id or name (default: the suite's, else 0); see `state show`")
    p.add_argument("--store-name", default=None, metavar="N", help="one named state store of the operator")
    p.add_argument("--join-side", choices=("left", "right"), default=None, help="one side of a stream-stream join")


def _snapshot_arg(p: argparse.ArgumentParser, dest: str = "snapshot_id", metavar: str = "SNAPSHOT") -> None:
    p.add_argument(dest, metavar=metavar, help="a snapshot id, `latest` or `latest-good:<suite>`")


def register(commands: Any) -> Handlers:

    state = commands.add_parser("state", help="a snapshot's state as a table: show it, export it")
    state.set_defaults(help_parser=state)
    sub = state.add_subparsers(dest="subcommand", metavar="SUBCOMMAND", parser_class=Parser)
    show = sub.add_parser("show", help="print rows of one operator's state, with the state's operators")
    add_store_options(show)
    _snapshot_arg(show)
    _selector_args(show)
    show.add_argument("--where", default=None, metavar="SQL", help="a Spark SQL filter, e.g. \"value_sum < 0\"")
    show.add_argument("--limit", type=int, default=20, metavar="K", help="rows to print (default 20)")
    export = sub.add_parser("export", help="write one operator's state to files")
    add_store_options(export)
    _snapshot_arg(export)
    _selector_args(export)
    export.add_argument("--where", default=None, metavar="SQL", help="a Spark SQL filter")
    export.add_argument("--format", required=True, choices=EXPORT_FORMATS, dest="fmt")
    export.add_argument("--output", required=True, metavar="PATH", help="a directory to create (must not exist)")

    diff = commands.add_parser("diff", help="compare two snapshots' state key by key")
    add_store_options(diff)
    _snapshot_arg(diff, "snapshot_a", "SNAPSHOT_A")
    _snapshot_arg(diff, "snapshot_b", "SNAPSHOT_B")
    diff.add_argument("--other-stream", default=None, metavar="Y",
                      help="SNAPSHOT_B is a snapshot of this stream (a clone) in the same store")
    _selector_args(diff)
    diff.add_argument("--sample", type=int, default=5, metavar="K", help="keys shown per kind (default 5)")

    validate = commands.add_parser("validate", help="run a Great Expectations suite on a snapshot's state")
    add_store_options(validate)
    _snapshot_arg(validate)
    validate.add_argument("--suite", required=True, metavar="FILE", help="a GX expectation suite (JSON)")
    _selector_args(validate)
    validate.add_argument("--data-docs", default=None, metavar="DIR", help="also write GX Data Docs HTML here")
    validate.add_argument("--no-record", action="store_true", help="run only: store no validation record")

    bisect = commands.add_parser("bisect", help="find the first snapshot whose state fails a suite")
    add_store_options(bisect)
    bisect.add_argument("--suite", required=True, metavar="FILE", help="a GX expectation suite (JSON)")
    bisect.add_argument("--good", default=None, metavar="SNAPSHOT", help="known good (default: before the first)")
    bisect.add_argument("--bad", default=None, metavar="SNAPSHOT", help="known bad (default: check the newest)")
    _selector_args(bisect)
    return {
        ("state", "show"): cmd_state_show,
        ("state", "export"): cmd_state_export,
        ("diff", None): cmd_diff,
        ("validate", None): cmd_validate,
        ("bisect", None): cmd_bisect,
    }


def _selector(args: argparse.Namespace) -> Any:
    from airflow_provider_streamstate.engine.state.reader import StateSelector

    return StateSelector(args.operator, args.store_name, args.join_side)


def _reader(args: argparse.Namespace) -> Any:
    """A StateReader on the command's store; Spark's own console chatter goes to stderr."""
    from airflow_provider_streamstate.engine.state.reader import StateReader

    return StateReader(open_store_from_args(args))


def _table(columns: list[str], rows: list[list[Any]]) -> list[str]:
    cells = [[("NULL" if v is None else str(v)) for v in r] for r in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    out = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    out += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return out


def _filtered(df: Any, where: str | None) -> Any:
    from airflow_provider_streamstate.engine.core.errors import UsageError

    if not where:
        return df
    import logging

    spark_log = logging.getLogger("SQLQueryContextLogger")  # PySpark logs the failure as an ERROR too
    level = spark_log.level
    spark_log.setLevel(logging.CRITICAL)
    try:
        out = df.where(where)
        out.schema  # noqa: B018 - analysis happens here: a bad filter fails now, in one line
        return out
    except Exception as exc:  # noqa: BLE001 - Spark's AnalysisException/ParseException
        first = " ".join(str(exc).split(" SQLSTATE")[0].split())[:300]
        raise UsageError(f"--where {where!r} is not a valid filter on the state: {first}",
                         hint=f"columns: {', '.join(df.columns)}") from None
    finally:
        spark_log.setLevel(level)


def cmd_state_show(args: argparse.Namespace) -> int:

    if args.limit < 0:
        print("streamstate: error: --limit must be at least 0", file=sys.stderr)
        return EXIT_USAGE
    with _reader(args) as reader:
        sel = _selector(args)
        df = reader.state(args.stream, args.snapshot_id, sel)
        m = reader.manifest(args.stream, args.snapshot_id)
        meta = reader.metadata(args.stream, m.snapshot_id)
        df = _filtered(df, args.where)
        rows = df.limit(args.limit).collect()
        total = df.count()
        data = {
            "snapshot_id": m.snapshot_id, "stream": m.stream, "batch_id": m.batch_id, "selector": sel.to_json(),
            "columns": df.columns, "rows": [json.loads(json.dumps(r.asDict(), default=str)) for r in rows],
            "total_rows": total, "metadata": meta.to_json(),
        }
    lines = [f"snapshot {m.snapshot_id} of {m.stream}, batch {m.batch_id}, {sel.describe()}"
             + (f", where {args.where}" if args.where else "")]
    lines += _table(df.columns, [[r[c] for c in df.columns] for r in rows])
    lines.append(f"({len(rows)} of {total} rows)")
    lines.append("operators: " + "; ".join(
        f"{s.operator_id} {s.operator_name} store {s.store_name}, {s.partitions} partitions, "
        f"batches {s.min_batch_id}..{s.max_batch_id}" for s in meta.stores))
    print_result(args, data, "\n".join(lines))
    return EXIT_OK


def cmd_state_export(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.core.errors import UsageError

    output = Path(args.output).expanduser().resolve()
    if output.exists():
        raise UsageError(f"export output {output} already exists", hint="give a path that does not exist yet")
    staging = output.parent / f".{output.name}.streamstate-export-{uuid.uuid4().hex[:8]}"
    with _reader(args) as reader:
        m = reader.manifest(args.stream, args.snapshot_id)
        df = _filtered(reader.state(args.stream, m.snapshot_id, _selector(args)), args.where)
        try:
            writer = df.write.mode("errorifexists")
            if args.fmt == "parquet":
                writer.parquet(str(staging))
            elif args.fmt == "csv":
                writer.option("header", "true").csv(str(staging))
            else:
                writer.json(str(staging))
            os.rename(staging, output)  # all files or none under the name asked for
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        rows = df.count()
    data = {"snapshot_id": m.snapshot_id, "stream": m.stream, "batch_id": m.batch_id, "format": args.fmt,
            "output": str(output), "rows": rows, "columns": df.columns}
    print_result(args, data, f"exported {rows} rows of {m.snapshot_id} ({args.fmt}) to {output}")
    return EXIT_OK


def cmd_diff(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.state.diff import diff_snapshots

    with _reader(args) as reader:
        d = diff_snapshots(reader, args.stream, args.snapshot_a, args.snapshot_b, _selector(args),
                           b_stream=args.other_stream, sample=args.sample)
    lines = [d.summary()]
    for kind in ("added", "removed", "changed"):
        for s in d.samples[kind]:
            lines.append(f"  {kind:8} {json.dumps(s['key'])} {json.dumps(s.get('before'))} -> {json.dumps(s.get('after'))}")
    if d.only_in_a or d.only_in_b:
        lines.append(f"  not compared: only in A {d.only_in_a}, only in B {d.only_in_b}")
    print_result(args, d.to_json(), "\n".join(lines))
    return EXIT_OK


def cmd_validate(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.state.validation import load_suite, validate_snapshot

    suite = load_suite(args.suite)  # a bad suite fails before Spark starts
    with _reader(args) as reader:
        result = validate_snapshot(reader, args.stream, args.snapshot_id, suite, selector=_selector(args),
                                   record=not args.no_record, data_docs=args.data_docs)
    r = result.to_json()
    lines = [("PASS " if result.success else "FAIL ") + result.summary().split(": ", 1)[0]
             + (" (stored result)" if result.reused else "")]
    lines += [f"  {o.describe()}" for o in result.record.failed]
    if result.data_docs:
        lines.append(f"data docs: {result.data_docs}")
    print_result(args, r, "\n".join(lines))
    return EXIT_OK if result.success else EXIT_VALIDATION_FAILED


def cmd_bisect(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.state.bisect import bisect_snapshots
    from airflow_provider_streamstate.engine.state.validation import load_suite

    suite = load_suite(args.suite)
    with _reader(args) as reader:
        result = bisect_snapshots(reader, args.stream, suite, selector=_selector(args), good=args.good, bad=args.bad)
    r = result.to_json()
    lines = [result.summary()]
    for s in result.steps:
        lines.append(f"  {s.snapshot_id} batch {s.batch_id}: {'good' if s.good else 'bad'} ({s.source})")
    if result.first_bad is not None:
        lines.append(f"first bad kafka offsets: {json.dumps(result.first_bad.kafka_offsets)}")
        if result.last_good is not None:
            lines.append(f"last good kafka offsets: {json.dumps(result.last_good.kafka_offsets)}")
    print_result(args, r, "\n".join(lines))
    return EXIT_OK
