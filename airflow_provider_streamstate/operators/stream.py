"""Operators that start, stop and clone streams. A stream never ends, so a start does not
hold a worker slot for it: the driver is launched detached (engine/streams/launcher.py), the task
waits only until the query runs, and returns the stream's handle. Whatever runs the stream
afterwards (watching, snapshotting, stopping) finds it through the records beside its
checkpoint, from any worker.

A retried start never launches a second copy: a stream that is running or starting on
the checkpoint is reconnected to, and its handle returned (the checkpoint's records are
the truth, whichever task, DAG run or host started it).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider_streamstate.engine.core.config.values import parse_duration, parse_flag
from airflow_provider_streamstate.operators.base import StreamTask
from airflow_provider_streamstate.spec import StreamSpec
from airflow_provider_streamstate.utils.task_errors import engine_errors


class StartStreamOperator(StreamTask):
    """Start a stream's driver detached and return its handle once its query runs.

    The application runs under spark-submit (the command the spec's `spark` connection
    gives: utils/spark_submit.py) inside a wrapper that gives it heartbeats
    and a graceful stop, without code changes. The task waits for the first progress
    event, not for the stream to end. A stream already running or starting on the
    checkpoint is reconnected to (a retry never launches a second copy). Returns the
    handle `{"stream", "checkpoint", "launch_id", "pid", "host", "log", "started_at"}`
    plus `query_id` and `reconnected`.

    :param stream: the stream, a `StreamSpec` or its `to_dict()`. (templated)
    :param startup_timeout: how long the query may take to run (a timedelta or seconds);
        a driver that has not run by then is killed and the task fails (retryable). (templated)
    """

    template_fields: Sequence[str] = ("stream", "startup_timeout")

    def __init__(self, *, startup_timeout: timedelta | float = timedelta(minutes=10), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.startup_timeout = startup_timeout

    def execute(self, context: Context) -> dict[str, Any]:
        spec = self.spec
        with self.cancellable():
            handle, status, reconnected = self.start_stream(spec, parse_duration(self.startup_timeout,
                                                                                "startup_timeout"))
        self.log.info("stream %s runs on %s: pid %d on %s, query %s, log %s", spec.name, spec.checkpoint,
                      handle.pid, handle.host, status.heartbeat.query_id if status.heartbeat else None, handle.log)
        return {**handle.to_json(), "query_id": status.heartbeat.query_id if status.heartbeat else None,
                "reconnected": reconnected}


class StopStreamOperator(StreamTask):
    """Stop a stream: graceful first (its driver lets the batch in flight finish and stops
    its queries), forced after `timeout` (its process group is killed; a restart re-runs
    the unfinished batch from the checkpoint). Stopping a stream that does not run succeeds.
    Returns `{"stream", "checkpoint", "outcome" (stopped|killed|not-running), "seconds",
    "state", "exit_code", "pid", "finished_planned_batch"}`.

    :param stream: the stream, a `StreamSpec` or its `to_dict()`. (templated)
    :param timeout: how long the graceful stop may take before the kill (a timedelta or
        seconds). A driver on another host cannot be killed from here: the task fails
        (retryable) when it has not stopped by then. (templated)
    :param finish_planned_batch: leave the checkpoint at a batch boundary: a busy stream may
        have planned its next batch before the stop came, and the stop interrupts it; then
        the stream runs once more, for exactly that batch (`finished_planned_batch` in the
        result), within `timeout` and ten minutes to start. What a rescale or an edit of the
        stopped checkpoint needs. When that run fails, the task fails with the stream stopped;
        its XCom holds the stop's result all the same.
    """

    template_fields: Sequence[str] = ("stream", "timeout")

    def __init__(self, *, timeout: timedelta | float = timedelta(minutes=2), finish_planned_batch: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.timeout = timeout
        self.finish_planned_batch = finish_planned_batch

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_streamstate.engine.streams import launcher

        spec = self.spec
        side = self.records(spec.checkpoint)  # the stop and the planned batch's run: one opened checkpoint
        with self.cancellable():
            result = launcher.stop(side, timeout_s=parse_duration(self.timeout, "timeout"),
                                   requested_by=f"task {self.task_id}")
        self.log.info("stream %s on %s: %s in %.1fs (state %s, exit code %s)", spec.name, spec.checkpoint,
                      result.outcome, result.seconds, result.state, result.exit_code)
        stopped = {"stream": spec.name, **result.to_json(), "finished_planned_batch": None}
        if self.finish_planned_batch:
            from airflow_provider_streamstate.streams.start import finish_planned_batch

            # Recorded before the batch is finished: if that fails, the task fails with the
            # stream stopped, and a rollback must know it ran before (`outcome`).
            context["ti"].xcom_push(key="return_value", value=stopped)
            with self.cancellable():
                stopped["finished_planned_batch"] = finish_planned_batch(
                    spec, timeout_s=parse_duration(self.timeout, "timeout") + 600, log=self.log, checkpoint=side)
        return stopped


def _overlaps(a: str, b: str) -> bool:
    """Same sink, or one path inside the other."""
    a, b = a.rstrip("/"), b.rstrip("/")
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def clone_conflicts(production: StreamSpec, clone: StreamSpec) -> list[str]:
    """Why `clone` could write where `production` does: shared sinks, the same
    checkpoint, or production's sinks or checkpoint hard-coded in its arguments."""
    problems = []
    if clone.name == production.name:
        problems.append(f"the clone has the production stream's name {production.name}")
    if _overlaps(os.path.abspath(clone.checkpoint), os.path.abspath(production.checkpoint)):
        problems.append(f"its checkpoint {clone.checkpoint} overlaps production's {production.checkpoint}")
    for key, value in sorted(clone.sinks.items()):
        for pkey, pvalue in sorted(production.sinks.items()):
            if _overlaps(value, pvalue):
                problems.append(f"sink {key}={value} is production's {pkey}")
    args = clone.resolved_args()
    for pkey, pvalue in sorted(production.sinks.items()):
        if any(_overlaps(v, pvalue) for v in clone.sinks.values()):
            continue  # said above
        if any(a == pvalue or a.endswith("=" + pvalue) for a in args):
            problems.append(f"its arguments name production's sink {pkey}={pvalue}")
    if production.checkpoint in args:
        problems.append(f"its arguments name production's checkpoint {production.checkpoint}")
    return list(dict.fromkeys(problems))


def _label(clone: StreamSpec, production: StreamSpec, snapshot_id: str, batch_id: int | None, query_id: str,
           ttl_s: float) -> Any:
    from airflow_provider_streamstate.engine.streams.clones import CloneLabel

    return CloneLabel.new(
        clone=clone.name, source_stream=production.name, source_checkpoint=production.checkpoint,
        snapshot_id=snapshot_id, batch_id=batch_id, query_id=query_id, sinks=clone.sinks, ttl_s=ttl_s,
    )


class CloneStreamOperator(StreamTask):
    """Clone a stream from one of its snapshots into a new stream with its own checkpoint,
    query id and sinks, labelled with an expiry, and (by default) start it.

    Refused, without writing anything, when the clone could write where production does:
    a sink equal to (or inside) one of production's, production's checkpoint, or
    production's sinks hard-coded in the application's arguments. The label
    `<clone checkpoint>/_streamstate/clone.json` (source stream, snapshot, sinks,
    `expires_at`) is what retention reads to delete expired clones. A retry reuses a clone
    it already restored and reconnects to a clone already running. Returns `{"clone",
    "checkpoint", "sinks", "expires_at", "snapshot_id", "batch_id", "handle"}`.

    :param stream: the production stream, a `StreamSpec` or its `to_dict()`. (templated)
    :param clone_name: the clone's stream name. (templated)
    :param clone_checkpoint: the clone's checkpoint directory, new or empty. (templated)
    :param sinks: the clone's sinks by key, over production's (every key production writes
        to must be given one of the clone's own). (templated)
    :param snapshot: the snapshot to clone, an id or `latest`. (templated)
    :param ttl: how long the clone lives (a timedelta or seconds): its label's expiry.
    :param start: start the clone (as StartStreamOperator does) once restored, through its
        checkpoint as the restore reached it.
    :param startup_timeout: how long the clone's query may take to run (a timedelta or seconds).
    :param parallelism: concurrent file transfers of the restore.
    :param delete_sinks_on_expiry: when the clone expires, also delete its sinks that are
        Kafka topics (on the stream's `kafka_conn_id` cluster). The clone is recorded in the
        store (`streams/<stream>/clones/<clone>.json`) for `streamstate clone list|expire`.
    """

    template_fields: Sequence[str] = ("stream", "clone_name", "clone_checkpoint", "sinks", "snapshot")

    def __init__(
        self, *, clone_name: str, clone_checkpoint: str, sinks: dict[str, str] | None = None,
        snapshot: str = "latest", ttl: timedelta | float = timedelta(days=1), start: bool = True,
        startup_timeout: timedelta | float = timedelta(minutes=10), delete_sinks_on_expiry: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.delete_sinks_on_expiry = delete_sinks_on_expiry
        self.clone_name = clone_name
        self.clone_checkpoint = clone_checkpoint
        self.sinks = sinks
        self.snapshot = snapshot
        self.ttl = ttl
        self.start = start
        self.startup_timeout = startup_timeout

    def clone_spec(self) -> StreamSpec:
        spec = self.spec
        with engine_errors():
            clone = spec.derive(name=self.clone_name, checkpoint=self.clone_checkpoint,
                                sinks={**spec.sinks, **dict(self.sinks or {})})
            conflicts = clone_conflicts(spec, clone)
        if conflicts:
            raise AirflowFailException(
                f"clone {clone.name} of {spec.name} could write into production: {'; '.join(conflicts)}; "
                f"give the clone its own sinks (sinks={{{', '.join(repr(k) + ': ...' for k in sorted(spec.sinks))}}}) "
                "and checkpoint"
            )
        return clone

    def _record(self, spec: StreamSpec, clone: StreamSpec, label: Any) -> None:
        """The clone's record in the source stream's store: how clone expiry finds it."""
        from airflow_provider_streamstate.engine.streams.clones import record_clone

        record_clone(self.hook.store, clone=clone.name, source_stream=spec.name, checkpoint=clone.checkpoint,
                     snapshot_id=label.snapshot_id, expires_at=label.expires_at, sinks=clone.sinks,
                     delete_sinks=parse_flag(self.delete_sinks_on_expiry, "delete_sinks_on_expiry"),
                     kafka_conn_id=clone.kafka_conn_id)

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_streamstate.engine.catalog.timeline import read_lineage
        from airflow_provider_streamstate.engine.checkpoint.sidecar import open_sidecar
        from airflow_provider_streamstate.engine.lifecycle.restore import open_target, restore_snapshot
        from airflow_provider_streamstate.engine.streams import clones

        spec = self.spec
        clone = self.clone_spec()
        with self.cancellable():
            ttl_s = parse_duration(self.ttl, "ttl")
            startup_s = parse_duration(self.startup_timeout, "startup_timeout")
            # The clone's checkpoint through the spec's connection, else the store's own, else the environment's.
            target = open_target(clone.checkpoint, self.hook.store, self.checkpoint_connection(clone.checkpoint))
            label = clones.read_clone_label(target)
            lineage = read_lineage(target)
            if label is None and lineage is not None and lineage.stream is None and lineage.source_stream == spec.name \
                    and self.snapshot in ("latest", lineage.snapshot_id):
                # Restored by an earlier try that died before labelling it.
                label = _label(clone, spec, lineage.snapshot_id, None, lineage.query_id, ttl_s)
                clones.write_clone_label(target, label)
            if label is not None and label.source_stream == spec.name and self.snapshot in ("latest", label.snapshot_id):
                self.log.info("clone %s of %s (snapshot %s) was restored by an earlier try: reusing it",
                              clone.name, spec.name, label.snapshot_id)
            else:
                restored = restore_snapshot(self.hook.store, spec.name, self.snapshot, target, new_query_id=True,
                                            parallelism=self.parallelism)
                label = _label(clone, spec, restored.manifest.snapshot_id, restored.manifest.batch_id,
                               restored.query_id, ttl_s)
                clones.write_clone_label(target, label)
            self._record(spec, clone, label)
            handle = None
            if parse_flag(self.start, "start"):  # the target as the restore reached it, seen afresh
                handle, _, _ = self.start_stream(clone, startup_s, checkpoint=open_sidecar(target.fresh()))
        self.log.info("clone %s of %s from snapshot %s on %s, sinks %s, expires %s%s", clone.name, spec.name,
                      label.snapshot_id, clone.checkpoint, clone.sinks, label.expires_at,
                      f", running (pid {handle.pid})" if handle else "")
        return {"clone": clone.name, "checkpoint": clone.checkpoint, "sinks": clone.sinks,
                "expires_at": label.expires_at, "snapshot_id": label.snapshot_id, "batch_id": label.batch_id,
                "handle": handle.to_json() if handle else None}
