"""`streamstate state get` and `state history`: one key of a stream's state, in a snapshot or
the live checkpoint, and across snapshots, without Spark (engine/lookup).

    streamstate state get     (--store S --stream X SNAPSHOT | --checkpoint C [--batch N]) --key K=V[,K2=V2]
                              [--operator ID|NAME] [--store-name N] [--join-side left|right]
                              [--state-var NAME|$timers] [--json]
    streamstate state history --store S --stream X --key K=V[,K2=V2] [--from SNAPSHOT|BATCH] [--to SNAPSHOT|BATCH]
                              [--timeline N] [--limit N] [--all] [--first-where EXPR] [--operator ...] [--json]

A key is `name=value` pairs, bare values in column order, or a JSON object
(engine/lookup/encodings/keytext.py); `--first-where` takes a condition such as `total > 100`
(engine/lookup/predicate.py). Both commands answer in milliseconds to seconds: they read
the key's partition only, never a whole snapshot, and start no Spark.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from airflow_provider_streamstate.cli.common import (
    EXIT_OK,
    Handlers,
    add_storage_conn_option,
    add_store_options,
    human_bytes,
    open_store_from_args,
    print_result,
)


def _key_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--key", required=True, action="append", metavar="K=V[,K2=V2]",
                   help="the state key: name=value pairs, values in column order, or a JSON object "
                   "(repeat --key to add columns)")
    p.add_argument("--operator", default="0", metavar="ID|NAME", help="stateful operator by id or name (default 0)")
    p.add_argument("--store-name", default=None, metavar="N", help="one named state store of the operator")
    p.add_argument("--join-side", choices=("left", "right"), default=None,
                   help="a stream-stream join: the side whose rows to show")
    p.add_argument("--state-var", default=None, metavar="NAME",
                   help="transformWithState: the state variable, or '$timers' for the key's registered timers")
    p.add_argument("--max-bytes", type=int, default=None, metavar="N",
                   help="refuse to read more than N bytes of state files (default: no limit)")


def register(sub: Any) -> Handlers:
    """Add `get` and `history` to the `state` command's subcommands."""
    get = sub.add_parser("get", help="one key of a snapshot or of the live checkpoint, without Spark")
    get.add_argument("--store", default=None, help="file:///abs/path, /abs/path, s3://bucket/prefix or hdfs://... "
                     "(with SNAPSHOT)")
    add_storage_conn_option(get, "--storage-conn-id", help="reach the store or checkpoint through this Airflow "
                            "connection (aws for s3://, streamstate_hdfs for hdfs://)")
    get.add_argument("--stream", default=None, help="the stream's name in the store (with SNAPSHOT)")
    get.add_argument("snapshot_id", nargs="?", default=None, metavar="SNAPSHOT",
                     help="a snapshot id, `latest` or `latest-good:<suite>`")
    get.add_argument("--checkpoint", default=None, metavar="LOCATION",
                     help="read the checkpoint itself (local, s3a://, hdfs://) at its newest committed batch")
    get.add_argument("--batch", type=int, default=None, metavar="N", help="with --checkpoint: a committed batch")
    get.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    _key_options(get)

    history = sub.add_parser("history", help="one key across a stream's snapshots, and where it changed")
    add_store_options(history)
    _key_options(history)
    history.add_argument("--from", dest="start", default=None, metavar="SNAPSHOT|BATCH",
                         help="the first snapshot (an id, `latest`) or batch of the range")
    history.add_argument("--to", dest="end", default=None, metavar="SNAPSHOT|BATCH",
                         help="the last snapshot or batch of the range (default: the newest)")
    history.add_argument("--timeline", type=int, default=None, metavar="N", help="default: the current timeline")
    history.add_argument("--limit", type=int, default=None, metavar="N", help="only the newest N snapshots of the range")
    history.add_argument("--all", action="store_true", help="print every snapshot, not only where the key changed")
    history.add_argument("--first-where", default=None, metavar="EXPR",
                         help="find the first snapshot where a condition holds, e.g. 'total > 100' or 'absent' "
                         "(a binary search)")
    return {("state", "get"): cmd_state_get, ("state", "history"): cmd_state_history}


def _key(args: argparse.Namespace) -> Any:
    from airflow_provider_streamstate.engine.core.errors import UsageError
    from airflow_provider_streamstate.engine.lookup import parse_key_text

    parts = [parse_key_text(text) for text in args.key]
    if len(parts) == 1:
        return parts[0]
    if all(isinstance(p, dict) for p in parts):
        merged: dict[str, Any] = {}
        for p in parts:
            twice = set(merged) & set(p)
            if twice:
                raise UsageError(f"--key names column {sorted(twice)[0]!r} twice")
            merged.update(p)
        return merged
    if all(isinstance(p, list) for p in parts):
        return [v for p in parts for v in p]
    raise UsageError("the --key options mix name=value pairs and bare values",
                     hint="name every column (name=value) or none (values in column order)")


def _selectors(args: argparse.Namespace) -> dict[str, Any]:
    return {"operator": args.operator, "store_name": args.store_name, "join_side": args.join_side,
            "state_var": args.state_var}


def _show(value: Any) -> str:
    from airflow_provider_streamstate.engine.lookup.encodings.values import to_jsonable

    return json.dumps(to_jsonable(value), ensure_ascii=False)


def cmd_state_get(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.core.errors import UsageError
    from airflow_provider_streamstate.engine.lookup import CheckpointSource, SnapshotSource, lookup_key

    if (args.snapshot_id is None) == (args.checkpoint is None):
        raise UsageError("state get reads a snapshot or a checkpoint: give SNAPSHOT (with --store and --stream) "
                         "or --checkpoint, one of them",
                         hint="e.g. `state get --store S --stream X latest --key k=v` or `--checkpoint DIR --key k=v`")
    if args.checkpoint is not None:
        if args.store or args.stream:
            raise UsageError("--checkpoint reads the checkpoint itself: it takes no --store or --stream",
                             hint="drop them, or name a SNAPSHOT of the store instead of --checkpoint")
        source: Any = CheckpointSource(args.checkpoint, args.batch, reader=_checkpoint_reader(args))
    else:
        if not args.store or not args.stream:
            raise UsageError("state get SNAPSHOT needs --store and --stream", hint="name the store and the stream")
        if args.batch is not None:
            raise UsageError("--batch goes with --checkpoint; a snapshot is one batch",
                             hint="name the snapshot of that batch (`streamstate snapshot list`)")
        source = SnapshotSource(open_store_from_args(args), args.stream, args.snapshot_id)
    hit = lookup_key(source, key=_key(args), max_bytes=args.max_bytes, **_selectors(args))
    lines = [f"{'found' if hit.found else 'not found'}" + (f"  {_show(hit.value)}" if hit.found and hit.kind == "value"
                                                         else "")]
    if hit.found and hit.kind != "value":
        lines += [f"  {_show(v)}" for v in hit.value]
    what = (f"{hit.state_var}" if hit.state_var else f"{hit.join_side} side" if hit.join_side else f"store {hit.store}")
    lines += [f"key       {_show(hit.key)}",
              f"operator  {hit.operator_id} {hit.operator_name}, {what}, partition {hit.partition}",
              f"source    {hit.source}",
              f"read      {len(hit.files_read)} files, {human_bytes(hit.bytes_read)} in {hit.requests} reads, "
              f"{hit.elapsed_ms:.1f} ms"
              + (" (cached)" if hit.cached else "")]
    print_result(args, hit.to_json(), "\n".join(lines))
    return EXIT_OK


def _checkpoint_reader(args: argparse.Namespace) -> Any:
    """The checkpoint through --storage-conn-id's connection when given, else the environment's."""
    from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader

    if not args.storage_conn_id:
        return CheckpointReader(args.checkpoint)
    from airflow_provider_streamstate.hooks.store import open_checkpoint

    return CheckpointReader(open_checkpoint(args.checkpoint, args.storage_conn_id))


def _batches(v: Any) -> str:
    if v.previous_batch_id is None or v.previous_batch_id + 1 == v.batch_id:
        return str(v.batch_id)
    return f"{v.previous_batch_id + 1}..{v.batch_id}"


def cmd_state_history(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.core.errors import UsageError
    from airflow_provider_streamstate.engine.lookup import bisect_key, key_history, parse_predicate

    store = open_store_from_args(args)
    if args.first_where is not None:
        if args.limit is not None or args.all:
            raise UsageError("--first-where searches the range: it takes no --limit or --all",
                             hint="narrow the range with --from and --to")
        b = bisect_key(store, args.stream, key=_key(args), where=parse_predicate(args.first_where),
                       start=args.start, end=args.end, timeline=args.timeline, max_bytes=args.max_bytes,
                       **_selectors(args))
        lines = [b.summary()] + [f"  batch {s.batch_id:<8} {s.snapshot_id}  "
                                 f"{_show(s.value) if s.found else 'absent'}" for s in b.steps]
        print_result(args, b.to_json(), "\n".join(lines))
        return EXIT_OK
    h = key_history(store, args.stream, key=_key(args), start=args.start, end=args.end, timeline=args.timeline,
                    limit=args.limit, max_bytes=args.max_bytes, **_selectors(args))
    shown = h.versions if args.all else tuple(h.changes)
    first, last = h.versions[0].batch_id, h.versions[-1].batch_id
    what = f", {h.state_var}" if h.state_var else f", {h.join_side} side" if h.join_side else ""
    rows = [["batch", "changed in", "snapshot", "value"]]
    rows += [[str(v.batch_id), _batches(v) if v.changed else "=", v.snapshot_id,
              _show(v.value) if v.found else "absent"] for v in shown]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [f"key {_show(h.key)} of operator {h.operator_id} ({h.operator_name}{what}), {len(h.versions)} snapshots "
             f"on timeline {h.timeline}, batches {first}..{last}"]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r[:3], widths, strict=True)) + "  " + r[3] for r in rows]
    lines.append(f"{len(h.changes)} change(s); {h.blobs_read} blobs ({human_bytes(h.bytes_read)}) read, "
                 f"{h.manifests_read} manifests, {h.elapsed_ms / 1000:.2f} s")
    print_result(args, h.to_json(), "\n".join(lines))
    return EXIT_OK
