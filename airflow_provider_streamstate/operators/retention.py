"""Retention of a stream's snapshots as an Airflow task: thin over engine/catalog/retention.py.

Retention deletes manifests (moved aside with their deletion time) and their validation
records, never blobs; the store maintenance DAG's garbage collection frees those once the
grace period has passed.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_provider_streamstate.configured import stream_spec
from airflow_provider_streamstate.spec import StreamSpec
from airflow_provider_streamstate.task_errors import CancellableTask, engine_errors

Duration = timedelta | str | float | int | None


def duration_seconds(value: Duration, what: str) -> float | None:
    """A duration given as `7d`/`12h`/`30m` text, a timedelta or seconds (None: not set)."""
    from airflow_provider_streamstate.engine.catalog.retention import parse_duration

    if value is None or value == "":
        return None
    if isinstance(value, timedelta):
        value = value.total_seconds()
    return parse_duration(value, what)


def as_bool(value: Any) -> bool:
    """A flag that may arrive rendered from a template as text ("True", "false")."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes", "on")
    return bool(value)


class ApplyRetentionOperator(CancellableTask, BaseOperator):
    """Delete the snapshots of a stream that a retention policy does not keep.

    Kept: the newest `keep_last` and everything younger than `max_age` on the current
    timeline, the newest of each hour (`keep_hourly`) and UTC day (`keep_daily`) of older
    history, pinned snapshots, the newest known-good snapshot per validation suite and the
    newest of the current timeline; abandoned timelines only while younger than
    `abandoned_max_age`. Returns `{"stream", "store", "dry_run", "policy",
    "snapshots_kept", "snapshots_deleted", "records_deleted", "kept", "deleted", "seconds"}`
    (each kept or deleted snapshot with its `reasons`).

    :param stream: the stream (a StreamSpec or its dict). (templated)
    :param store: apply it in this store instead of the stream's (e.g. the DR store). (templated)
    :param aws_conn_id: the AWS connection of `store`; default the stream's. (templated)
    :param keep_last: keep the newest N snapshots of the current timeline. (templated)
    :param max_age: keep everything younger (`7d`, `12h`, a timedelta or seconds). (templated)
    :param keep_hourly: keep the newest of each hour younger than this. (templated)
    :param keep_daily: keep the newest of each UTC day younger than this. (templated)
    :param abandoned_max_age: age limit of abandoned timelines' snapshots; default max_age. (templated)
    :param dry_run: report what would be deleted; delete nothing. (templated)
    :param parallelism: concurrent store requests.
    """

    template_fields: Sequence[str] = (
        "stream", "store", "aws_conn_id", "keep_last", "max_age", "keep_hourly", "keep_daily", "abandoned_max_age",
        "dry_run",
    )

    def __init__(
        self, *, stream: StreamSpec | dict[str, Any], store: str | None = None, aws_conn_id: str | None = None,
        keep_last: int = 1, max_age: Duration = None, keep_hourly: Duration = None, keep_daily: Duration = None,
        abandoned_max_age: Duration = None, dry_run: bool = False, parallelism: int = 8, **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.stream = stream
        self.store = store
        self.aws_conn_id = aws_conn_id
        self.keep_last = keep_last
        self.max_age = max_age
        self.keep_hourly = keep_hourly
        self.keep_daily = keep_daily
        self.abandoned_max_age = abandoned_max_age
        self.dry_run: Any = dry_run
        self.parallelism = parallelism

    @cached_property
    def spec(self) -> StreamSpec:
        with engine_errors():
            return stream_spec(self.stream)

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_streamstate.engine.catalog.retention import RetentionPolicy, apply_retention
        from airflow_provider_streamstate.engine.core.errors import UsageError
        from airflow_provider_streamstate.hooks.store import StreamstateStoreHook

        spec = self.spec
        dry_run = as_bool(self.dry_run)
        store_url = self.store or spec.store
        conn = self.aws_conn_id if self.store else (self.aws_conn_id or spec.aws_conn_id)
        with engine_errors():
            try:
                keep_last = int(self.keep_last)
            except (TypeError, ValueError):
                raise UsageError(f"keep_last must be a whole number, not {self.keep_last!r}") from None
            policy = RetentionPolicy(
                keep_last=keep_last, max_age_s=duration_seconds(self.max_age, "max_age"),
                keep_hourly_s=duration_seconds(self.keep_hourly, "keep_hourly"),
                keep_daily_s=duration_seconds(self.keep_daily, "keep_daily"),
                abandoned_max_age_s=duration_seconds(self.abandoned_max_age, "abandoned_max_age"),
            )
        self.log.info("retention of %s in %s%s: %s", spec.name, store_url, " (dry run)" if dry_run else "",
                      policy.to_json())
        with self.cancellable():
            store = StreamstateStoreHook(store_url, aws_conn_id=conn, parallelism=self.parallelism).store
            result = apply_retention(store, spec.name, policy, dry_run=dry_run, parallelism=self.parallelism)
        for v in result.deleted:
            self.log.info("%s %s: %s", "would delete" if dry_run else "deleted", v.snapshot_id, "; ".join(v.reasons))
        for v in result.kept:
            self.log.info("kept %s: %s", v.snapshot_id, "; ".join(v.reasons))
        return result.to_json()
