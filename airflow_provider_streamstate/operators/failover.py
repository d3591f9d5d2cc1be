"""Operators of a disaster-recovery failover: fence the primary stream, then restore the
stream in the DR region with its Kafka offsets translated for the mirrored cluster
(`engine.dr.failover`). Thin over the engine; each returns a small JSON summary for XCom."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider_streamstate.assets.streams import FAILOVERS, checkpoint_asset, emit, with_outlet
from airflow_provider_streamstate.engine.core.config.values import optional_duration, parse_flag
from airflow_provider_streamstate.engine.core.errors import StreamstateError
from airflow_provider_streamstate.links.streams_ui import SnapshotLink
from airflow_provider_streamstate.operators.base import StreamTask
from airflow_provider_streamstate.spec import StreamSpec
from airflow_provider_streamstate.utils.configured_streams import stream_spec
from airflow_provider_streamstate.utils.task_errors import engine_errors


class FencePrimaryStreamOperator(BaseOperator):
    """Make sure the primary copy of a stream no longer runs before another copy starts:
    two live copies would double every output. A reachable primary is stopped (graceful,
    then killed after `timeout` seconds when its driver runs on this host). When its state
    cannot be known (its checkpoint or host is gone with the region), the task fails unless
    `force` says the operator fenced it by other means. Returns `{"stream", "fenced",
    "outcome", "detail"}`.

    :param stream: the primary stream, a StreamSpec or its dict; empty when unknown. (templated)
    :param force: go on when the primary's state cannot be known. (templated)
    :param timeout: seconds a graceful stop may take before the kill.
    """

    template_fields: Sequence[str] = ("stream", "force")

    def __init__(self, *, stream: StreamSpec | dict[str, Any] | str | None, force: bool | str = False,
                 timeout: float = 120.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stream = stream
        self.force = force
        self.timeout = timeout

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_streamstate.engine.streams import launcher

        with engine_errors():
            force = parse_flag(self.force, "force")
        if not self.stream:
            if not force:
                raise AirflowFailException(
                    "no primary stream given, so whether it still runs is unknown; give its spec, or set force "
                    "once it is fenced by other means")
            self.log.warning("no primary stream given; going on (force)")
            return {"stream": None, "fenced": False, "outcome": "unknown", "detail": "no primary stream given"}
        with engine_errors():
            spec = stream_spec(self.stream)
        try:
            from airflow_provider_streamstate.hooks.store import open_checkpoint

            result = launcher.stop(open_checkpoint(spec.checkpoint, spec.storage_conn_id), timeout_s=float(self.timeout),
                                   requested_by=f"task {self.task_id}")
        except (StreamstateError, OSError) as exc:
            reason = exc.one_line() if isinstance(exc, StreamstateError) else f"{type(exc).__name__}: {exc}"
            if not force:
                raise AirflowFailException(
                    f"cannot tell whether primary stream {spec.name} still runs ({reason}); fence it by other "
                    "means (stop its cluster, revoke its sink credentials), then re-run with force") from exc
            self.log.warning("primary stream %s: state unknown (%s); going on (force)", spec.name, reason)
            return {"stream": spec.name, "fenced": False, "outcome": "unknown", "detail": reason}
        self.log.info("primary stream %s: %s (state %s)", spec.name, result.outcome, result.state)
        return {"stream": spec.name, "fenced": True, "outcome": result.outcome, "detail": result.state}


class FailoverStreamOperator(StreamTask):
    """Restore a stream from its DR store into its DR checkpoint, with every Kafka topic and
    offset the checkpoint names translated for the mirrored DR cluster, so the same
    application started there resumes with the next batch: nothing read twice, nothing
    skipped (engine.dr.failover). The snapshot is the given one, else the newest on the
    current timeline that translates exactly (and passed `suite`, when given). Nothing is
    written to the target unless all of it succeeded. With `standby`, the DR checkpoint is
    the warm standby replication keeps (engine.dr.standby): promoted in place (only the
    offset files written) when it holds that snapshot and verifies byte for byte, else the
    snapshot is restored over it. Returns `{"stream", "store", "snapshot_id", "batch_id",
    "target", "translated", "skipped_snapshots", "events_behind", "rewritten",
    "seconds_choose", "seconds_restore", "seconds_rewrite", "seconds_translate", "standby",
    "seconds_verify_standby"}`; `standby` (null without one) says whether it was `used`, and
    why not (`reason`), with what its verification read.

    Emits an event on the DR stream's checkpoint asset (assets/streams.py; outlet: the
    `streamstate-failovers` alias) with `{"stream", "store", "checkpoint", "snapshot_id",
    "batch_id", "events_behind", "kafka"}` as its extra; links to the restored snapshot's
    page in the Streams UI (in the DR store); reports OpenLineage, DR snapshot and topics to
    the DR checkpoint (utils/openlineage.py).

    :param stream: the stream as it runs in DR: its checkpoint is the (new or empty) target,
        its store the DR store, its `kafka_conn_id` the DR cluster. (templated)
    :param snapshot: a snapshot id or `latest`; default the newest that translates. (templated)
    :param topic_map: DR topic names, as `{"SRC": "DST"}` or a list of `SRC=DST`; they win
        over the replication policy. (templated)
    :param replication_policy: the mirror's naming: `default` (`<source alias>.<topic>`) or
        `identity`. (templated)
    :param source_alias: the primary cluster's alias in MirrorMaker 2. (templated)
    :param suite: only snapshots that passed this validation suite. (templated)
    :param kafka_conn_id: the DR cluster's Airflow `kafka` connection; default the spec's.
        (templated)
    :param mirror_timeout: with `snapshot`: seconds to wait for the mirror to hold its last
        records (a failback's final snapshot, taken just now) before refusing. (templated)
    :param standby: the spec's checkpoint is a warm standby (`replicate --standby`, the
        scheduled snapshot DAG's `dr_standby`). (templated)
    :param verify_standby: `checksums` (each file's sha256 recorded as it was written, while
        the filesystem gives it the same version) or `full` (every byte read). (templated)
    :param parallelism: concurrent file transfers.
    """

    template_fields: Sequence[str] = ("stream", "snapshot", "topic_map", "replication_policy", "source_alias",
                                      "suite", "kafka_conn_id", "mirror_timeout", "standby", "verify_standby")
    operator_extra_links = (SnapshotLink(),)

    def __init__(
        self, *, snapshot: str | None = None, topic_map: dict[str, str] | list[str] | None = None,
        replication_policy: str = "default", source_alias: str = "primary", suite: str | None = None,
        kafka_conn_id: str | None = None, mirror_timeout: float | str = 0.0, standby: bool | str = False,
        verify_standby: str = "checksums", **kwargs: Any,
    ) -> None:
        super().__init__(**with_outlet(kwargs, FAILOVERS))
        self._result: dict[str, Any] | None = None  # for lineage, once executed
        self._kafka_bootstrap: str | None = None
        self.snapshot = snapshot
        self.topic_map = topic_map
        self.replication_policy = replication_policy
        self.source_alias = source_alias
        self.suite = suite
        self.kafka_conn_id = kafka_conn_id
        self.mirror_timeout = mirror_timeout
        self.standby = standby
        self.verify_standby = verify_standby

    def _topic_map(self) -> Any:
        from airflow_provider_streamstate.engine.dr.failover import TopicMap

        items = self.topic_map or []
        if isinstance(items, dict):
            items = [f"{k}={v}" for k, v in items.items()]
        return TopicMap.parse(list(items), self.replication_policy or "default", self.source_alias or "")

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_streamstate.engine.dr.failover import failover

        spec = self.spec
        bootstrap, config = self.kafka_settings(self.kafka_conn_id)
        assert bootstrap is not None
        with engine_errors():
            topic_map = self._topic_map()
            mirror_wait = optional_duration(self.mirror_timeout or None, "mirror_timeout") or 0.0
            standby = parse_flag(self.standby, "standby")
        self.log.info("failover of %s from %s into %s%s for %s", spec.name, spec.store, spec.checkpoint,
                      " (a warm standby)" if standby else "", bootstrap)
        with self.cancellable():
            result = failover(
                self.hook.store, spec.name, spec.checkpoint, bootstrap,
                snapshot=self.snapshot or None, topic_map=topic_map, suite=self.suite or None,
                kafka_config=config or None, parallelism=self.parallelism, mirror_wait_s=mirror_wait,
                connection=self.checkpoint_connection(spec.checkpoint), standby=standby,
                verify_standby=self.verify_standby or "checksums",
            )
        out = {**result.to_json(), "store": spec.store}
        if result.standby is not None:
            self.log.info("warm standby %s", "promoted" if result.standby.usable
                          else f"not used ({result.standby.reason}): restored over it")
        for skipped in out["skipped_snapshots"]:
            self.log.info("skipped %s: %s", skipped["snapshot_id"], skipped["reason"])
        self.log.info("restored %s (batch %s) for DR; %s record(s) to catch up", out["snapshot_id"], out["batch_id"],
                      out["events_behind"])
        emit(context, self.outlets, FAILOVERS, checkpoint_asset(spec.name, spec.checkpoint), {
            "stream": spec.name, "store": spec.store, "checkpoint": spec.checkpoint, "kafka": bootstrap,
            **{k: out[k] for k in ("snapshot_id", "batch_id", "events_behind")},
        })
        self._result, self._kafka_bootstrap = out, bootstrap
        return out

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """Inputs: the restored snapshot in the DR store (its version) and the DR topics the
        stream resumes from; output: the DR checkpoint."""
        from airflow_provider_streamstate.utils.openlineage import empty_lineage, failover_lineage

        if self._result is None:
            return empty_lineage()
        topics = sorted({p["dr_topic"] for p in self._result["translated"]})
        return failover_lineage(store=self.spec.store, checkpoint=self.spec.checkpoint, result=self._result,
                                kafka_bootstrap=self._kafka_bootstrap, topics=topics)
