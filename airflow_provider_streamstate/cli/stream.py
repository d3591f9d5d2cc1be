"""`streamstate stream start|status|stop|supervise`: what the stream operators do, for people
at a terminal and for scripts, from any host that reaches the checkpoint's storage (and the
cluster manager, for drivers in cluster deploy mode).

    streamstate stream start     --spec SPEC [--master M] [--deploy-mode client|cluster]
                                 [--startup-timeout SECONDS] [--json]
    streamstate stream status    (--checkpoint CKPT | --spec SPEC) [--json]
    streamstate stream stop      (--checkpoint CKPT | --spec SPEC) [--timeout SECONDS] [--json]
    streamstate stream recover   (--checkpoint CKPT | --spec SPEC) [--json]
    streamstate stream supervise --spec SPEC [--max-lag N] [--freshness SECONDS]
                                 [--restore checkpoint-errors|any-failure|never] [--snapshot SNAPSHOT]
                                 [--settle SECONDS] [--kafka-bootstrap HOST:PORT] [--json]

SPEC is a StreamSpec as JSON, or the path of a file holding it. spark-submit's master and
deploy mode come from the spec, or these options, else its `spark_conn_id` Airflow
connection. `status`, `recover` and a plain `stop` reach the checkpoint (given, or the
spec's) with the environment's credentials; `start`, `supervise` and a stop that finishes
its planned batch open the spec's checkpoint once, with its `storage_conn_id`, and hand it to
every step.
"""

from __future__ import annotations

import argparse
import logging
import socket
from typing import TYPE_CHECKING, Any

from airflow_provider_streamstate.cli.common import (
    EXIT_OK,
    Handlers,
    Parser,
    add_kafka_options,
    kafka_config_from_args,
    open_store_with,
    print_result,
    read_spec,
    use_spec_connection,
)

if TYPE_CHECKING:
    from airflow_provider_streamstate.engine.checkpoint.filesystems import CheckpointFS
    from airflow_provider_streamstate.engine.checkpoint.sidecar import Sidecar
    from airflow_provider_streamstate.spec import StreamSpec

log = logging.getLogger("streamstate.cli")


def register(commands: Any) -> Handlers:
    stream = commands.add_parser("stream", help="start, watch, stop and supervise a stream's driver")
    stream.set_defaults(help_parser=stream)
    sub = stream.add_subparsers(dest="subcommand", metavar="SUBCOMMAND", parser_class=Parser)

    start = sub.add_parser("start", help="start the stream's driver detached; return once its query runs")
    start.add_argument("--spec", required=True, help="the StreamSpec: JSON, or a file holding it")
    start.add_argument("--master", default=None, help="spark-submit's master (over the spec's)")
    start.add_argument("--deploy-mode", choices=["client", "cluster"], default=None,
                       help="where the driver runs: here (client) or on the cluster (YARN, Kubernetes)")
    start.add_argument("--startup-timeout", type=float, default=600.0, metavar="SECONDS",
                       help="how long the query may take to run (default 600)")
    start.add_argument("--json", action="store_true", help="print one JSON document on stdout")

    for name, text in (("status", "the stream's state: the records beside its checkpoint and its cluster manager"),
                       ("stop", "stop it gracefully (after its batch), then kill it after --timeout"),
                       ("recover", "finish a rescale or restore a crash left half-swapped (fenced) on the checkpoint")):
        p = sub.add_parser(name, help=text)
        where = p.add_mutually_exclusive_group(required=True)
        where.add_argument("--checkpoint", help="the stream's checkpoint (a path or s3a://bucket/path)")
        where.add_argument("--spec", help="the StreamSpec: JSON, or a file holding it")
        if name == "stop":
            p.add_argument("--timeout", type=float, default=120.0, metavar="SECONDS",
                           help="how long the graceful stop may take before the kill (default 120)")
            p.add_argument("--finish-planned-batch", action="store_true",
                           help="end at a batch boundary: when the stop interrupted a batch the stream had planned, "
                                "run it once more for exactly that batch (needs --spec)")
        p.add_argument("--json", action="store_true", help="print one JSON document on stdout")

    sup = sub.add_parser("supervise", help="one supervision round: check, restart, restore a verified snapshot")
    sup.add_argument("--spec", required=True, help="the StreamSpec: JSON, or a file holding it")
    sup.add_argument("--max-lag", type=int, default=None, metavar="N", help="most records any partition may lag")
    sup.add_argument("--freshness", type=float, default=None, metavar="SECONDS",
                     help="a batch must commit this often while records wait")
    sup.add_argument("--restore", choices=["checkpoint-errors", "any-failure", "never"], default="checkpoint-errors",
                     help="when a failed restart restores the newest verified snapshot (default checkpoint-errors)")
    sup.add_argument("--snapshot", default="latest", help="the snapshot to restore (default latest)")
    sup.add_argument("--settle", type=float, default=180.0, metavar="SECONDS",
                     help="how long a restarted stream is watched for its first batch (default 180)")
    add_kafka_options(sup, required=False, help="the stream's Kafka cluster, for the lag checks")
    sup.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    return {("stream", "start"): cmd_start, ("stream", "status"): cmd_status, ("stream", "stop"): cmd_stop,
            ("stream", "recover"): cmd_recover, ("stream", "supervise"): cmd_supervise}


def _starter(spec: Any) -> Any:
    """The start the operators use (spark-submit through the Spark provider's hook), with
    this process's `spark` connection made from the spec when it names its master."""
    use_spec_connection(spec)
    from airflow_provider_streamstate.streams.start import start_stream

    return start_stream


def cmd_start(args: argparse.Namespace) -> int:
    spec = read_spec(args.spec)
    if args.master or args.deploy_mode:
        spec = spec.derive(master=args.master or spec.master, deploy_mode=args.deploy_mode or spec.deploy_mode)
    handle, status, reconnected = _starter(spec)(spec, startup_timeout_s=args.startup_timeout, log=log)
    out = {**handle.to_json(), "query_id": status.heartbeat.query_id if status.heartbeat else None,
           "reconnected": reconnected, "state": status.state}
    where = f"application {status.app.app_id}" if status.app is not None and hasattr(status.app, "app_id") else \
        f"pid {handle.pid} on {handle.host}"
    print_result(args, out, f"{'reconnected to' if reconnected else 'started'} {spec.name} on {spec.checkpoint}: "
                            f"{status.state} ({where}), log {status.log or handle.log}")
    return EXIT_OK


def _checkpoint(args: argparse.Namespace) -> str:
    return str(args.checkpoint) if args.checkpoint else read_spec(args.spec).checkpoint


def cmd_status(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.checkpoint.sidecar import open_sidecar
    from airflow_provider_streamstate.engine.streams import launcher

    side = open_sidecar(_checkpoint(args))  # opened once: the records, then the checkpoint's layout
    st = launcher.status(side)
    data = st.to_json()
    beat = st.heartbeat
    lines = [f"{st.checkpoint}: {st.state}"]
    if st.handle is not None:
        lines.append(f"  launch {st.handle.launch_id} (generation {st.handle.generation}) from {st.handle.host} "
                     f"at {st.handle.started_at}")
    if st.app is not None:
        lines.append(f"  cluster: {st.app.to_json()}")
    if beat is not None:
        lines.append(f"  query {beat.query_name or beat.query_id}: batch {beat.batch_id}, last beat "
                     f"{beat.age_s():.0f}s ago ({beat.host})")
    if st.writer:
        lines.append(f"  not started by streamstate: {st.writer}")
    if st.last_error:
        lines.append(f"  last error: {st.last_error}")
    unfinished = _unfinished_repartition(side.fs.fresh())
    data["checkpoint_problem"] = unfinished
    if unfinished:
        lines.append(f"  checkpoint: {unfinished}; restore its newest good snapshot (docs/runbooks/rescale.md)")
    if st.log:
        lines.append(f"  log: {st.log}")
    print_result(args, data, "\n".join(lines))
    return EXIT_OK


def _unfinished_repartition(checkpoint: CheckpointFS) -> str | None:
    """A repartition Spark wrote and never committed (it will not start the query on it)."""
    from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
    from airflow_provider_streamstate.engine.checkpoint.repartition import unfinished_repartition
    from airflow_provider_streamstate.engine.core.errors import StreamstateError

    try:
        found = unfinished_repartition(CheckpointReader(checkpoint))
    except StreamstateError:
        return None  # no checkpoint yet, or one status has already said it cannot read
    return found.describe() if found is not None else None


def cmd_stop(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.streams import launcher

    if args.finish_planned_batch and not args.spec:
        from airflow_provider_streamstate.engine.core.errors import UsageError

        raise UsageError("--finish-planned-batch runs the stream once more, which needs its --spec",
                         hint="give --spec instead of --checkpoint")
    spec: StreamSpec | None = None
    side: Sidecar | None = None
    if args.finish_planned_batch:
        spec = read_spec(args.spec)
        use_spec_connection(spec)
        from airflow_provider_streamstate.streams.start import opened_checkpoint

        side = opened_checkpoint(spec)  # the stop and the planned batch's run: one opened checkpoint
    result = launcher.stop(side or _checkpoint(args), timeout_s=args.timeout,
                           requested_by=f"streamstate stream stop on {socket.gethostname()}")
    text = (f"{result.checkpoint}: {result.outcome} in {result.seconds:.1f}s (state {result.state}, exit code "
            f"{result.exit_code})")
    finished = None
    if spec is not None:
        from airflow_provider_streamstate.streams.start import finish_planned_batch

        finished = finish_planned_batch(spec, timeout_s=args.timeout + 600, log=log, checkpoint=side)
        if finished is not None:
            text += f"; ran once more to commit its planned batch {finished}"
    print_result(args, {**result.to_json(), "finished_planned_batch": finished}, text)
    return EXIT_OK


def cmd_recover(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.checkpoint.filesystems import open_checkpoint_fs
    from airflow_provider_streamstate.engine.checkpoint.swap import recover_swap

    location = _checkpoint(args)
    actions = recover_swap(open_checkpoint_fs(location))
    print_result(args, {"checkpoint": location, "actions": actions},
                 "\n".join(f"{location}: {a}" for a in actions) or f"{location}: no swap to finish")
    return EXIT_OK


def cmd_supervise(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.streams.supervisor import SupervisionPolicy, supervise

    spec = read_spec(args.spec)
    policy = SupervisionPolicy(freshness_s=args.freshness, max_lag=args.max_lag, restore=args.restore,
                               settle_s=args.settle)
    offsets = None
    if args.kafka_bootstrap:
        from airflow_provider_streamstate.engine.kafka.offsets import broker_offsets

        client = kafka_config_from_args(args)

        def offsets(committed: dict[str, dict[str, int]]) -> Any:
            return broker_offsets(args.kafka_bootstrap, committed, config=client)

    start = _starter(spec)
    from airflow_provider_streamstate.streams.start import opened_checkpoint

    side = opened_checkpoint(spec)  # the round and its restarts: one opened checkpoint
    report = supervise(spec.name, side, start=lambda: start(spec, startup_timeout_s=600, log=log, checkpoint=side)[0],
                       policy=policy, store=lambda: open_store_with(spec.store, spec.storage_conn_id), broker_offsets=offsets,
                       snapshot=args.snapshot)
    print_result(args, report.to_json(), report.message)
    return EXIT_OK

