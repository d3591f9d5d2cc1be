"""Retention of a stream's snapshots as an Airflow task: thin over engine/catalog/retention.py.

Retention deletes manifests (moved aside with their deletion time) and their validation
records, never blobs; the store maintenance DAG's garbage collection frees those once the
grace period has passed.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import Context

from airflow_provider_streamstate.engine.core.config.values import optional_duration, parse_flag
from airflow_provider_streamstate.operators.base import StreamTask, Subject
from airflow_provider_streamstate.spec import StreamSpec
from airflow_provider_streamstate.utils.renamed_arguments import current_argument
from airflow_provider_streamstate.utils.task_errors import engine_errors

Duration = timedelta | str | float | int | None


class ApplyRetentionOperator(StreamTask):
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
    :param storage_conn_id: the Airflow connection of `store`; default the stream's. (templated)
    :param keep_last: keep the newest N snapshots of the current timeline. (templated)
    :param max_age: keep everything younger (`7d`, `12h`, a timedelta or seconds). (templated)
    :param keep_hourly: keep the newest of each hour younger than this. (templated)
    :param keep_daily: keep the newest of each UTC day younger than this. (templated)
    :param abandoned_max_age: age limit of abandoned timelines' snapshots; default max_age. (templated)
    :param dry_run: report what would be deleted; delete nothing. (templated)
    :param parallelism: concurrent store requests.
    :param aws_conn_id: the old name of `storage_conn_id` (deprecated).
    """

    template_fields: Sequence[str] = (
        "stream", "store", "storage_conn_id", "keep_last", "max_age", "keep_hourly", "keep_daily", "abandoned_max_age",
        "dry_run",
    )

    def __init__(
        self, *, stream: StreamSpec | dict[str, Any], store: str | None = None, storage_conn_id: str | None = None,
        keep_last: int = 1, max_age: Duration = None, keep_hourly: Duration = None, keep_daily: Duration = None,
        abandoned_max_age: Duration = None, dry_run: bool = False, aws_conn_id: str | None = None, **kwargs: Any,
    ) -> None:
        storage_conn_id = current_argument("storage_conn_id", storage_conn_id, aws_conn_id,
                                           owner=type(self).__name__)
        super().__init__(stream=stream, **kwargs)
        self.store = store
        self.storage_conn_id = storage_conn_id
        self.keep_last = keep_last
        self.max_age = max_age
        self.keep_hourly = keep_hourly
        self.keep_daily = keep_daily
        self.abandoned_max_age = abandoned_max_age
        self.dry_run: Any = dry_run

    def subject(self) -> Subject:
        """The stream in `store` when given (its own connection, default the stream's only for its own store)."""
        spec = self.spec
        if not self.store:
            return Subject(f"stream {spec.name}", spec.store, self.storage_conn_id or spec.storage_conn_id, spec.kafka_conn_id)
        return Subject(f"stream {spec.name}", self.store, self.storage_conn_id, spec.kafka_conn_id)

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_streamstate.engine.catalog.retention import RetentionPolicy, apply_retention
        from airflow_provider_streamstate.engine.core.errors import UsageError

        spec = self.spec
        store_url = self.subject().store
        with engine_errors():
            dry_run = parse_flag(self.dry_run, "dry_run")
            try:
                keep_last = int(self.keep_last)
            except (TypeError, ValueError):
                raise UsageError(f"keep_last must be a whole number, not {self.keep_last!r}") from None
            policy = RetentionPolicy(
                keep_last=keep_last, max_age_s=optional_duration(self.max_age, "max_age"),
                keep_hourly_s=optional_duration(self.keep_hourly, "keep_hourly"),
                keep_daily_s=optional_duration(self.keep_daily, "keep_daily"),
                abandoned_max_age_s=optional_duration(self.abandoned_max_age, "abandoned_max_age"),
            )
        self.log.info("retention of %s in %s%s: %s", spec.name, store_url, " (dry run)" if dry_run else "",
                      policy.to_json())
        with self.cancellable():
            result = apply_retention(self.hook.store, spec.name, policy, dry_run=dry_run, parallelism=self.parallelism)
        for v in result.deleted:
            self.log.info("%s %s: %s", "would delete" if dry_run else "deleted", v.snapshot_id, "; ".join(v.reasons))
        for v in result.kept:
            self.log.info("kept %s: %s", v.snapshot_id, "; ".join(v.reasons))
        return result.to_json()
