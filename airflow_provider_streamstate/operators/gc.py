"""Garbage collection of a snapshot store as an Airflow task: thin over engine/catalog/gc.py."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import Context

from airflow_provider_streamstate.engine.core.config.values import optional_duration, parse_flag
from airflow_provider_streamstate.operators.base import StreamstateTask, Subject
from airflow_provider_streamstate.utils.renamed_arguments import current_argument
from airflow_provider_streamstate.utils.task_errors import engine_errors


class GarbageCollectOperator(StreamstateTask):
    """Delete the blobs of a store that no snapshot references, after a grace period.

    Mark and sweep over the whole store (every stream shares its blobs); safe while
    snapshots, replication and retention run. One collection deletes from a store at a
    time (the store's GC lease): a second one fails at once, deleting nothing, and its
    retry runs later (docs/retention.md).
    Returns `{"store", "dry_run", "grace_seconds", "manifests", "tombstones_live",
    "blobs_kept", "bytes_kept", "blobs_deleted", "bytes_deleted", "blobs_young",
    "bytes_young", "blobs_missing", "temp_deleted", "tombstones_deleted",
    "kept_unreferenced", "missing_examples", "seconds"}`.

    :param store: the store URL (`s3://bucket/prefix`, `file:///abs/path`). (templated)
    :param storage_conn_id: the store's Airflow connection (`aws` for S3, `streamstate_hdfs` for HDFS). (templated)
    :param grace: delete only what was last written longer ago (`24h`, a timedelta or
        seconds; default 24h, and more than the longest snapshot, 6h). (templated)
    :param dry_run: report what would be deleted; delete nothing. (templated)
    :param parallelism: concurrent store requests.
    :param aws_conn_id: the old name of `storage_conn_id` (deprecated).
    """

    template_fields: Sequence[str] = ("store", "storage_conn_id", "grace", "dry_run")

    def __init__(
        self, *, store: str, storage_conn_id: str | None = None, grace: timedelta | str | float | None = None,
        dry_run: bool = False, aws_conn_id: str | None = None, **kwargs: Any,
    ) -> None:
        storage_conn_id = current_argument("storage_conn_id", storage_conn_id, aws_conn_id,
                                           owner=type(self).__name__)
        super().__init__(**kwargs)
        self.store = store
        self.storage_conn_id = storage_conn_id
        self.grace = grace
        self.dry_run: Any = dry_run

    def subject(self) -> Subject:
        return Subject(f"store {self.store}", self.store, self.storage_conn_id or None)

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_streamstate.engine.catalog.gc import DEFAULT_GRACE_SECONDS, collect_garbage

        with engine_errors():
            grace = optional_duration(self.grace, "grace") or DEFAULT_GRACE_SECONDS
            dry_run = parse_flag(self.dry_run, "dry_run")
        self.log.info("garbage collection of %s, grace %ss%s", self.store, grace, " (dry run)" if dry_run else "")
        with self.cancellable():
            result = collect_garbage(self.hook.store, grace_seconds=grace, dry_run=dry_run, parallelism=self.parallelism)
        out = result.to_json()
        self.log.info("%s %d blobs (%d bytes); kept %d; young %d; %d temp; %d tombstones",
                      "would delete" if result.dry_run else "deleted", result.blobs_deleted, result.bytes_deleted,
                      result.blobs_kept, result.blobs_young, result.temp_deleted, result.tombstones_deleted)
        for reason, v in result.kept_unreferenced.items():
            self.log.info("kept %d unreferenced-looking blobs: %s", v["blobs"], reason)
        return out
