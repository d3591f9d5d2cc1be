"""Rescaling a stream's state as an Airflow task: thin over streams/rescale.py and
engine/state/rescale.py."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import Context

from airflow_provider_streamstate.engine.core.config.values import optional_duration
from airflow_provider_streamstate.operators.base import StreamTask
from airflow_provider_streamstate.utils.task_errors import engine_errors


class RescaleStreamOperator(StreamTask):
    """Spread a stream's state over another number of partitions with Spark's offline
    repartition (Spark 4.2+, RocksDB state), on a verified copy: from `snapshot` (default a
    new snapshot of the stopped stream), restored to a work copy, repartitioned there by a
    Spark application through the stream's own Spark connection, verified key by key by
    that application's executors (their digests compared again here), put in place of the
    stopped stream's checkpoint behind a fence (the source snapshot pinned: a rollback is one
    restore of it) and only then snapshotted (labels `rescaled-from`, `partitions`), or
    written as a clone at `target`. A running stream (in place), HDFS-backed
    state, a checkpoint begun before Spark 4.0, an older Spark or the current number of
    partitions fail the task without retries, with nothing changed. Returns `{"stream",
    "source_snapshot", "rescaled_snapshot", "from_partitions", "to_partitions",
    "repartition_batch", "checkpoint", "in_place", "pinned", "spark_version", "stores",
    "seconds"}`.

    :param stream: the stream, a `StreamSpec` or its `to_dict()`. (templated)
    :param partitions: the number of state partitions. (templated)
    :param snapshot: the source snapshot: an id, `latest` or `latest-good:<suite>`; default a
        new snapshot of the stopped stream. (templated)
    :param target: write the rescaled state as a clone at this checkpoint instead of in
        place. (templated)
    :param clone_name: the clone's name in the store (default `<stream>-rescaled`). (templated)
    :param timeout: how long the repartition's Spark application may run before it is
        killed (a timedelta or seconds; None: no limit). (templated)
    :param ship_code: whether the repartition's application gets this package's code as a zip
        in its py-files, so that the cluster's Python needs no copy of this package; None: on
        a cluster (any master but `local`).
    """

    template_fields: Sequence[str] = ("stream", "partitions", "snapshot", "target", "clone_name", "timeout")

    def __init__(
        self, *, partitions: int | str, snapshot: str | None = None, target: str | None = None,
        clone_name: str | None = None, timeout: timedelta | float | None = None, ship_code: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.partitions = partitions
        self.snapshot = snapshot
        self.target = target
        self.clone_name = clone_name
        self.timeout = timeout
        self.ship_code = ship_code

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_streamstate.engine.core.errors import UsageError
        from airflow_provider_streamstate.streams.rescale import rescale_spec

        spec = self.spec
        with engine_errors():
            try:
                partitions = int(self.partitions)
            except (TypeError, ValueError):
                raise UsageError(f"partitions must be a whole number, not {self.partitions!r}",
                                 hint="pass an int or a template that renders one") from None
            timeout_s = optional_duration(self.timeout, "timeout")
        where = f"as a clone at {self.target}" if self.target else "in place"
        self.log.info("rescaling %s to %d state partitions %s", spec.name, partitions, where)
        with self.cancellable():
            result = rescale_spec(spec, partitions, snapshot=self.snapshot or None, target=self.target or None,
                                  clone_name=self.clone_name or None, timeout_s=timeout_s,
                                  parallelism=self.parallelism, ship_code=self.ship_code)
        self.log.info("rescaled %s %d -> %d partitions: snapshot %s from %s (repartition batch %d)%s", spec.name,
                      result.from_partitions, result.to_partitions, result.rescaled_snapshot, result.source_snapshot,
                      result.repartition_batch,
                      f"; {result.pinned} is pinned for a rollback" if result.pinned else "")
        if result.snapshot_error:
            self.log.warning("the rescaled state is in place, but its snapshot failed: %s", result.snapshot_error)
        return dict(result.to_json())
