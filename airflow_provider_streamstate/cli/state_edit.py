"""`streamstate state edit`: repair keys of a stream's state in place of a replay: delete
them or set their values, in a new batch written on a verified copy of a snapshot, then put
in place (the stream stopped; the source snapshot pinned for a rollback) or written as a
clone. A dry run unless --apply.

    streamstate state edit --spec SPEC (--edit JSON|FILE | --transform MODULE:FUNCTION [--where COND]
                           | --migrate-to CKPT [--default COL=JSON]... [--pair COL=COL]...) [--operator ID|NAME]
                           [--store-name N] [--description TEXT] [--snapshot SNAPSHOT]
                           [--dry-run | --apply [--target CKPT [--clone-name NAME]]] [--requested-by WHO]
                           [--no-spark-check] [--verify changes|state] [--master M] [--deploy-mode client|cluster]
                           [--timeout SECONDS] [--json]

SPEC is the stream's StreamSpec (JSON, or a file holding it): its checkpoint and store, and
the Spark whose state reader checks the edited copy (Spark 4.0+). The edit (JSON, or a file
holding it) is `{"operator": 0, "store": "default", "delete": [KEY, ...], "delete_where":
CONDITION, "set": [{"key": KEY, "value": VALUE}, ...]}` or a list of them (docs/state.md). SNAPSHOT is an id, `latest`
or `latest-good:<suite>`; by default the dry run reads the checkpoint and --apply takes a
new snapshot of the stopped stream. `--transform` names a Python function of (key, value),
importable here, that returns each key's new value (or some of its columns), None to delete
the key, or the value unchanged; it is called for every key of the operator's store (those
`--where` selects) and its answers become the edit. `--migrate-to` rewrites every key of the
operator's store into the value schema of the same operator in CKPT, a checkpoint the new
query version wrote (engine/edit/migrate.py): columns kept or widened by name, new ones
`--default` (else null), dropped ones gone, and the schema file replaced, so the new version
starts on the state. Columns of one name (two aggregates of one function: `sum`, `sum#2`, in
the query's order) are not paired by name: `--pair NEW=OLD` names the state's column each
new one continues.
"""

from __future__ import annotations

import argparse
from pathlib import Path
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


def register(sub: Any) -> Handlers:
    """Add `edit` to the `state` command's subcommands."""
    p = sub.add_parser("edit", help="delete keys or set their values, on a verified copy (a dry run unless --apply)")
    p.add_argument("--spec", required=True, help="the stream's StreamSpec: JSON, or a file holding it")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--edit", metavar="JSON|FILE", help="the keys to delete and to set")
    what.add_argument("--transform", metavar="MODULE:FUNCTION",
                      help="a function of (key, value) giving each key's new value, or None to delete it")
    what.add_argument("--migrate-to", metavar="CKPT",
                      help="rewrite the state into the value schema a new query version wrote in CKPT")
    p.add_argument("--default", action="append", default=[], metavar="COL=JSON",
                   help="with --migrate-to: a new column's value for the existing keys (default null)")
    p.add_argument("--pair", action="append", default=[], metavar="NEW=OLD",
                   help="with --migrate-to: the state's column a new one continues (for columns of one name: "
                   "sum, sum#2, ...)")
    p.add_argument("--where", metavar="COND", default=None,
                   help="with --transform: only the keys whose value (and key.<column>) satisfy this")
    p.add_argument("--operator", default="0", metavar="ID|NAME",
                   help="with --transform or --migrate-to: the stateful operator")
    p.add_argument("--store-name", default="default", metavar="N",
                   help="with --transform or --migrate-to: its state store")
    p.add_argument("--description", default=None, metavar="TEXT",
                   help="what the edit repairs (the result's snapshot is labelled with it)")
    p.add_argument("--snapshot", default=None, help="the source snapshot (default: the checkpoint, or a new snapshot "
                   "of the stopped stream with --apply)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="say what would change, write nothing (the default)")
    mode.add_argument("--apply", action="store_true", help="write, verify and put the edit in place (or the clone)")
    p.add_argument("--target", metavar="CKPT", help="with --apply: write the edited state as a clone at this checkpoint")
    p.add_argument("--clone-name", metavar="NAME", help="the clone's name in the store (default <stream>-edited)")
    p.add_argument("--requested-by", metavar="WHO", default=None, help="who asked (a label of the result's snapshot)")
    p.add_argument("--no-spark-check", action="store_true",
                   help="verify the copy without Spark only (Spark's state reader needs Spark 4.0+)")
    p.add_argument("--verify", choices=["changes", "state"], default="changes",
                   help="how the copy is proved before it is used: from what the edit wrote (changes, the default: "
                   "the source's files unchanged, the new files decoded) or from digests of the whole state at N "
                   "and N+1 (state: reads every entry twice); a migration always reads the state")
    p.add_argument("--master", default=None, help="spark-submit's master for the check (over the spec's)")
    p.add_argument("--deploy-mode", choices=["client", "cluster"], default=None, help="where the check's driver runs")
    p.add_argument("--timeout", type=duration, default=None, metavar="SECONDS",
                   help="how long Spark's check may run before it is killed (default: no limit)")
    add_parallelism(p)
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    b = sub.add_parser("bootstrap", help="a new checkpoint's state from a table, resuming at given Kafka offsets")
    b.add_argument("--spec", required=True, help="the stream's StreamSpec: its checkpoint (new, empty) and Spark")
    b.add_argument("--skeleton", required=True, metavar="CKPT",
                   help="a checkpoint the stream's query wrote (once, on a little input): its shape")
    b.add_argument("--table", required=True, metavar="FILE|URL",
                   help="the state's rows (.parquet, .csv or .jsonl; a path, or an s3:// or hdfs:// URL), columns "
                   "key_<field> and value_<field>")
    b.add_argument("--offsets", default=None, metavar="JSON",
                   help='per source, where the stream starts: [{"topic": {"0": 1200, ...}}] (default: the skeleton\'s)')
    b.add_argument("--operator", default="0", metavar="ID|NAME", help="the stateful operator the table is the state of")
    b.add_argument("--store-name", default="default", metavar="N", help="its state store")
    b.add_argument("--no-spark-check", action="store_true",
                   help="verify without Spark only (Spark's state reader needs Spark 4.0+)")
    b.add_argument("--timeout", type=duration, default=None, metavar="SECONDS",
                   help="how long Spark's check may run before it is killed (default: no limit)")
    b.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    return {("state", "edit"): cmd_state_edit, ("state", "bootstrap"): cmd_state_bootstrap}


def cmd_state_bootstrap(args: argparse.Namespace) -> int:
    import json

    from airflow_provider_streamstate.engine.edit.bootstrap import given_offsets

    offsets = given_offsets(args.offsets, "--offsets")
    spec = read_spec(args.spec)
    use_spec_connection(spec)
    from airflow_provider_streamstate.streams.edit import bootstrap_spec

    operator = int(args.operator) if args.operator.isdigit() else args.operator
    r = bootstrap_spec(spec, args.skeleton, args.table, operator=operator, store=args.store_name,
                       source_offsets=offsets, spark_check=not args.no_spark_check, timeout_s=args.timeout)
    checked = f"; Spark {r.spark['spark_version']} read it the same" if r.spark else \
        "; not checked by Spark (--no-spark-check)"
    print_result(args, r.to_json(), f"bootstrapped {r.checkpoint}: {r.keys} key(s) of operator {args.operator} "
                 f"at batch 0, verified{checked}; the stream starts at {json.dumps(r.source_offsets)}")
    return EXIT_OK


def _edit_text(value: str) -> str:
    if value.lstrip().startswith(("{", "[")):
        return value
    path = Path(value).expanduser()
    if not path.is_file():
        from airflow_provider_streamstate.engine.core.errors import UsageError

        raise UsageError(f"--edit {value!r} is neither JSON nor a file", hint="give the edit as JSON or a file of it")
    return path.read_text()


def _defaults(items: list[str]) -> dict[str, Any]:
    """`COL=JSON` pairs (a bare word is text)."""
    import json

    from airflow_provider_streamstate.engine.core.errors import UsageError

    out: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name:
            raise UsageError(f"--default {item!r} is not COL=VALUE", hint="e.g. --default max=0")
        try:
            out[name] = json.loads(text)
        except ValueError:
            out[name] = text
    return out


def cmd_state_edit(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.core.errors import UsageError
    from airflow_provider_streamstate.engine.edit.changes import EditSpec

    if (args.target or args.clone_name) and not args.apply:
        raise UsageError("--target and --clone-name write a clone: give them with --apply",
                         hint="run the dry run without them, then --apply --target CKPT")
    if args.clone_name and not args.target:
        raise UsageError("--clone-name names a clone: give it with --target", hint="or leave --clone-name out")
    if args.edit and (args.where or args.operator != "0" or args.store_name != "default"):
        raise UsageError("--where, --operator and --store-name select what --transform is given",
                         hint="with --edit, name the operator, store and keys (or delete_where) in the edit")
    if args.where and not args.transform:
        raise UsageError("--where selects the keys --transform is given", hint="a migration rewrites every key")
    if (args.default or args.pair) and not args.migrate_to:
        raise UsageError("--default and --pair say where a migrated column's values come from",
                         hint="give them with --migrate-to")
    pairs = {}
    for item in args.pair:
        new, sep, old = item.partition("=")
        if not sep or not new or not old:
            raise UsageError(f"--pair {item!r} is not NEW=OLD", hint="e.g. --pair sum#2=sum")
        pairs[new] = old
    defaults = _defaults(args.default)
    spec = read_spec(args.spec)
    if args.master or args.deploy_mode:
        spec = spec.derive(master=args.master or spec.master, deploy_mode=args.deploy_mode or spec.deploy_mode)
    use_spec_connection(spec)
    from airflow_provider_streamstate.streams.edit import (
        Opened,
        edit_spec,
        migration,
        opened_for_edit,
        planned_transform,
        transform_source,
    )

    operator = int(args.operator) if args.operator.isdigit() else args.operator
    edit: Any
    opened: Opened | None = None
    if args.transform:  # its snapshot, its plan and the edit: one opened checkpoint
        opened = opened_for_edit(spec, parallelism=args.parallelism)
        args.snapshot = transform_source(spec, args.snapshot, args.apply, opened=opened)
        edit = planned_transform(spec, args.transform, where=args.where, operator=operator, store=args.store_name,
                                 snapshot=args.snapshot, description=args.description, opened=opened).edit
    elif args.migrate_to:
        edit = migration(spec, args.migrate_to, operator=operator, store=args.store_name, defaults=defaults,
                         description=args.description, pairs=pairs)
    else:
        edit = EditSpec.from_json(_edit_text(args.edit), args.description)

    r = edit_spec(spec, edit, apply=args.apply, snapshot=args.snapshot, target=args.target,
                  clone_name=args.clone_name, spark_check=not args.no_spark_check, requested_by=args.requested_by,
                  timeout_s=args.timeout, parallelism=args.parallelism, opened=opened, verify=args.verify)
    p = r.preview
    lines = [f"{'would change' if r.dry_run else 'changed'} {p.changed} key(s) of {r.stream} ({r.description}) in "
             f"{p.source} at batch {p.batch_id}:"]
    for c in p.partitions:
        lines.append(f"  operator {c.operator_id} ({c.operator}) store {c.store} partition {c.partition}: "
                     f"{c.removed} removed, {c.replaced} replaced, {c.added} added"
                     + (f", {c.absent} to delete not there" if c.absent else ""))
    if r.dry_run:
        lines.append("nothing was written: run again with --apply (the stream stopped), or --apply --target CKPT "
                     "for a clone")
    else:
        where = "in place" if r.in_place else f"as a clone at {r.checkpoint}"
        snapshot = (f"snapshot {r.edited_snapshot}" if r.edited_snapshot else
                    f"not snapshotted ({r.snapshot_error}: take one with `streamstate snapshot create`)")
        checked = f"; Spark {r.spark['spark_version']} read it the same" if r.spark else \
            "; not checked by Spark (--no-spark-check)"
        lines.append(f"edit batch {r.edit_batch} {where}: {snapshot} (edited from {r.source_snapshot}, "
                     f"{r.verified_text()}{checked})")
        if r.pinned:
            lines.append(f"{r.pinned} is pinned: restore it to roll back")
    print_result(args, r.to_json(), "\n".join(lines))
    return EXIT_OK
