"""`streamstate state show|export`, `diff`, `validate`, `bisect`: a snapshot's state as a
table, two states compared, a Great Expectations suite run on it, history bisected (Spark
jobs); `state get|history`: one key, without Spark (cli/state_keys.py); `state edit`: keys repaired
(cli/state_edit.py).

    streamstate state show   --store S --stream X SNAPSHOT [--operator ID|NAME] [--store-name N]
                             [--join-side left|right] [--state-var NAME|*|$timers] [--where SQL] [--limit K] [--json]
    streamstate state export --store S --stream X SNAPSHOT [--operator ...] --format parquet|csv|jsonl --output PATH
    streamstate diff         --store S --stream X SNAPSHOT_A SNAPSHOT_B [--other-stream Y] [--operator ...] [--json]
    streamstate validate     --store S --stream X SNAPSHOT --suite FILE [--operator ...] [--data-docs DIR] [--json]
    streamstate bisect       --store S --stream X --suite FILE [--good SNAPSHOT] [--bad SNAPSHOT] [--operator ...] [--json]

Every command takes [--master URL [--deploy-mode client|cluster] [--conf K=V ...] [--jars J,...]
[--ship-code | --no-ship-code]].

SNAPSHOT is an id, `latest` or `latest-good:<suite>`. Without --master each command starts
one local Spark session here (a few seconds) on a copy of the snapshot in a temp directory,
removed when it ends. With --master it runs as a Spark application there (spark-submit:
YARN, standalone, local), reading the snapshot from a scratch copy inside the store
(docs/state.md); this machine holds no state, only the small result.
`validate` exits 0 when the suite passes and 3 when it fails; errors exit 1 (2 for usage).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from airflow_provider_streamstate.cli import state_edit, state_keys
from airflow_provider_streamstate.cli.common import (
    EXIT_OK,
    EXIT_USAGE,
    Handlers,
    Parser,
    add_store_options,
    print_result,
)
from airflow_provider_streamstate.cli.state_jobs import add_job_options, run_job, submitted


class _ExportFormats:
    """The engine's export formats (`engine.state.jobs`), imported only when argparse checks a
    value: `streamstate --help` and `state get` do not import the Spark jobs. (argparse formats
    an argument's metavar when it is added: `EXPORT_METAVAR` spares it iterating these.)"""

    @staticmethod
    def _all() -> tuple[str, ...]:
        from airflow_provider_streamstate.engine.state.jobs import EXPORT_FORMATS

        return tuple(EXPORT_FORMATS)

    def __contains__(self, value: object) -> bool:
        return value in self._all()

    def __iter__(self) -> Any:
        return iter(self._all())


EXPORT_FORMATS = _ExportFormats()
EXPORT_METAVAR = "{parquet,csv,jsonl}"  # the same as the engine's, checked by the CLI's tests

EXIT_VALIDATION_FAILED = 3


def _selector_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--operator", default=None, metavar="ID|NAME",
                   help="stateful operator by id or name (default: the suite's, else 0); see `state show`")
    p.add_argument("--store-name", default=None, metavar="N", help="one named state store of the operator")
    p.add_argument("--join-side", choices=("left", "right"), default=None, help="one side of a stream-stream join")
    p.add_argument("--state-var", default=None, metavar="NAME",
                   help="transformWithState: one state variable, '*' for all of them (a state_var column), "
                   "'$timers' for the registered timers")


def _snapshot_arg(p: argparse.ArgumentParser, dest: str = "snapshot_id", metavar: str = "SNAPSHOT") -> None:
    p.add_argument(dest, metavar=metavar, help="a snapshot id, `latest` or `latest-good:<suite>`")


def register(commands: Any) -> Handlers:

    state = commands.add_parser("state", help="a snapshot's state: show it, export it, get one key and its history")
    state.set_defaults(help_parser=state)
    sub = state.add_subparsers(dest="subcommand", metavar="SUBCOMMAND", parser_class=Parser)
    show = sub.add_parser("show", help="print rows of one operator's state, with the state's operators")
    add_store_options(show)
    _snapshot_arg(show)
    _selector_args(show)
    show.add_argument("--where", default=None, metavar="SQL", help="a Spark SQL filter, e.g. \"value_sum < 0\"")
    show.add_argument("--limit", type=int, default=20, metavar="K", help="rows to print (default 20)")
    add_job_options(show)
    export = sub.add_parser("export", help="write one operator's state to files")
    add_store_options(export)
    _snapshot_arg(export)
    _selector_args(export)
    export.add_argument("--where", default=None, metavar="SQL", help="a Spark SQL filter")
    export.add_argument("--format", required=True, choices=EXPORT_FORMATS, dest="fmt", metavar=EXPORT_METAVAR)
    export.add_argument("--output", required=True, metavar="PATH",
                        help="a directory to create (must not exist), or an s3a://bucket/path")
    add_job_options(export)
    key_commands = state_keys.register(sub)
    edit_commands = state_edit.register(sub)

    diff = commands.add_parser("diff", help="compare two snapshots' state key by key")
    add_store_options(diff)
    _snapshot_arg(diff, "snapshot_a", "SNAPSHOT_A")
    _snapshot_arg(diff, "snapshot_b", "SNAPSHOT_B")
    diff.add_argument("--other-stream", default=None, metavar="Y",
                      help="SNAPSHOT_B is a snapshot of this stream (a clone) in the same store")
    _selector_args(diff)
    diff.add_argument("--sample", type=int, default=5, metavar="K", help="keys shown per kind (default 5)")
    add_job_options(diff)

    validate = commands.add_parser("validate", help="run a Great Expectations suite on a snapshot's state")
    add_store_options(validate)
    _snapshot_arg(validate)
    validate.add_argument("--suite", required=True, metavar="FILE", help="a GX expectation suite (JSON)")
    _selector_args(validate)
    validate.add_argument("--data-docs", default=None, metavar="DIR", help="also write GX Data Docs HTML here")
    validate.add_argument("--no-record", action="store_true", help="run only: store no validation record")
    add_job_options(validate)

    bisect = commands.add_parser("bisect", help="find the first snapshot whose state fails a suite")
    add_store_options(bisect)
    bisect.add_argument("--suite", required=True, metavar="FILE", help="a GX expectation suite (JSON)")
    bisect.add_argument("--good", default=None, metavar="SNAPSHOT", help="known good (default: before the first)")
    bisect.add_argument("--bad", default=None, metavar="SNAPSHOT", help="known bad (default: check the newest)")
    _selector_args(bisect)
    add_job_options(bisect)
    return {
        ("state", "show"): cmd_state_show,
        ("state", "export"): cmd_state_export,
        ("diff", None): cmd_diff,
        ("validate", None): cmd_validate,
        ("bisect", None): cmd_bisect,
        **key_commands,
        **edit_commands,
    }


def _selector(args: argparse.Namespace) -> Any:
    from airflow_provider_streamstate.engine.state.reader import StateSelector

    return StateSelector(args.operator, args.store_name, args.join_side, args.state_var)


def _request(args: argparse.Namespace, kind: str, **fields: Any) -> Any:
    from airflow_provider_streamstate.engine.state.jobs import StateJobRequest

    return StateJobRequest(kind=kind, store=args.store, stream=args.stream, selector=_selector(args).to_json(),
                           **fields)


def _table(columns: list[str], rows: list[list[Any]]) -> list[str]:
    cells = [[("NULL" if v is None else str(v)) for v in r] for r in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    out = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    out += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return out


def cmd_state_show(args: argparse.Namespace) -> int:
    if args.limit < 0:
        print("streamstate: error: --limit must be at least 0", file=sys.stderr)
        return EXIT_USAGE
    r = run_job(args, _request(args, "show", snapshot=args.snapshot_id, where=args.where, limit=args.limit))
    data = {k: v for k, v in r.items() if k not in ("kind", "job_id", "where")}
    sel = _selector(args)
    lines = [f"snapshot {r['snapshot_id']} of {r['stream']}, batch {r['batch_id']}, {sel.describe()}"
             + (f", where {args.where}" if args.where else "")]
    lines += _table(r["columns"], [[row.get(c) for c in r["columns"]] for row in r["rows"]])
    lines.append(f"({len(r['rows'])} of {r['total_rows']} rows)")
    lines.append("operators: " + "; ".join(
        f"{s['operator_id']} {s['operator_name']} store {s['store_name']}, {s['partitions']} partitions, "
        f"batches {s['min_batch_id']}..{s['max_batch_id']}" for s in r["metadata"]["stores"]))
    print_result(args, data, "\n".join(lines))
    return EXIT_OK


def cmd_state_export(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.core.errors import UsageError

    output = args.output
    on_cluster = bool(args.spark_conn_id) or bool(args.master and not args.master.startswith("local"))
    if output.startswith(("s3a://", "s3://")):
        if not submitted(args):
            raise UsageError(f"an export to {output} needs the S3A connector, which the local session lacks",
                             hint="run it as an application: --master 'local[*]' --jars <hadoop-aws and the AWS "
                             "SDK bundle>, or a cluster")
    elif "://" not in output or output.startswith("file://"):
        if on_cluster:  # the executors would write their files on their own hosts
            raise UsageError(f"export output {output} is a local path, but the export runs on a cluster",
                             hint="give an s3a://bucket/path the executors can write, or run it here")
        path = Path(output.removeprefix("file://")).expanduser().resolve()
        if path.exists():  # before any Spark work
            raise UsageError(f"export output {path} already exists", hint="give a path that does not exist yet")
        output = str(path)
    else:
        raise UsageError(f"unsupported export output {output!r}", hint="give a local path or an s3a://bucket/path")
    r = run_job(args, _request(args, "export", snapshot=args.snapshot_id, where=args.where, fmt=args.fmt,
                            output=output))
    data = {k: v for k, v in r.items() if k not in ("kind", "job_id")}
    print_result(args, data, f"exported {r['rows']} rows of {r['snapshot_id']} ({args.fmt}) to {r['output']}")
    return EXIT_OK


def cmd_diff(args: argparse.Namespace) -> int:
    d = run_job(args, _request(args, "diff", snapshot=args.snapshot_a, other_snapshot=args.snapshot_b,
                            other_stream=args.other_stream, sample=args.sample))
    lines = [d["summary"]]
    for kind in ("added", "removed", "changed"):
        for s in d["samples"][kind]:
            lines.append(f"  {kind:8} {json.dumps(s['key'])} {json.dumps(s.get('before'))} -> {json.dumps(s.get('after'))}")
    if d["only_in_a"] or d["only_in_b"]:
        lines.append(f"  not compared: only in A {d['only_in_a']}, only in B {d['only_in_b']}")
    print_result(args, {k: v for k, v in d.items() if k not in ("kind", "job_id", "summary")}, "\n".join(lines))
    return EXIT_OK


def cmd_validate(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.state.validation import load_suite

    suite = load_suite(args.suite, check=not submitted(args))  # a bad suite fails before Spark starts
    r = run_job(args, _request(args, "validate", snapshot=args.snapshot_id, suite=suite.definition,
                            record=not args.no_record, data_docs=args.data_docs))
    lines = [("PASS " if r["success"] else "FAIL ") + r["summary"].split(": ", 1)[0]
             + (" (stored result)" if r["reused"] else "")]
    lines += [f"  {f}" for f in r["failures"]]
    if r.get("data_docs"):
        lines.append(f"data docs: {r['data_docs']}")
    print_result(args, {k: v for k, v in r.items() if k not in ("kind", "job_id", "summary", "failures")},
                 "\n".join(lines))
    return EXIT_OK if r["success"] else EXIT_VALIDATION_FAILED


def cmd_bisect(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.state.validation import load_suite

    suite = load_suite(args.suite, check=not submitted(args))  # submitted: the job checks it with GX
    r = run_job(args, _request(args, "bisect", suite=suite.definition, good=args.good, bad=args.bad))
    lines = [r["summary"]]
    for s in r["steps"]:
        lines.append(f"  {s['snapshot_id']} batch {s['batch_id']}: {'good' if s['good'] else 'bad'} ({s['source']})")
    if r["first_bad"] is not None:
        lines.append(f"first bad kafka offsets: {json.dumps(r['kafka_offsets'])}")
        if r["last_good"] is not None:
            lines.append(f"last good kafka offsets: {json.dumps(r['last_good_kafka_offsets'])}")
    print_result(args, {k: v for k, v in r.items() if k not in ("kind", "job_id", "summary")}, "\n".join(lines))
    return EXIT_OK
