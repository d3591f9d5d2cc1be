"""Operators over a stream's snapshots: take one, restore one, verify them. Thin over the
store hook and the engine; each returns a small JSON summary for XCom."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider_streamstate.assets.streams import SNAPSHOTS, emit, snapshots_asset, with_outlet
from airflow_provider_streamstate.links.streams_ui import SnapshotLink
from airflow_provider_streamstate.operators.base import StreamTask


class SnapshotStreamOperator(StreamTask):
    """Take a consistent snapshot of a (running) stream into its store.

    A retry after the snapshot was published finds it and returns it (a snapshot of a
    batch the newest snapshot already holds is that snapshot). Returns `{"snapshot_id",
    "stream", "batch_id", "timeline", "reused", "store", "files", "bytes_total",
    "bytes_uploaded", "blobs_uploaded", "files_hashed", "bytes_hashed", "files_from_checksum", "parent",
    "kafka_offsets", "watermark_ms", "state_store", "attempts", "blobs_missing",
    "blobs_inherited", "blobs_checked", "anchored_partitions", "anchor_problems", "seconds"}`.

    When the stream spec names its Kafka connection (`kafka_conn_id`), the snapshot records
    per partition the last record its batch consumed (Kafka anchors), which failover to a
    mirrored DR cluster needs; an unreachable cluster costs the anchors, not the snapshot.

    Emits an event on the stream's snapshots asset in its store (assets/streams.py; outlet: the
    `streamstate-snapshots` alias) with `{"stream", "store", "snapshot_id", "batch_id",
    "timeline", "bytes_total", "bytes_uploaded", "reused"}` as its extra; links to the
    snapshot's page in the Streams UI; reports OpenLineage (utils/openlineage.py).

    :param stream: the stream (a StreamSpec or its dict). (templated)
    :param batch_id: committed batch to cut at; default the newest. (templated)
    :param labels: KEY=VALUE labels for the snapshot. (templated)
    :param always: take a new snapshot even when the newest one holds the batch.
    :param parallelism: concurrent file transfers.
    """

    template_fields: Sequence[str] = ("stream", "batch_id", "labels")
    operator_extra_links = (SnapshotLink(),)

    def __init__(
        self, *, batch_id: int | None = None, labels: dict[str, str] | None = None, always: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(**with_outlet(kwargs, SNAPSHOTS))
        self.batch_id = batch_id
        self.labels = labels
        self.always = always
        self._result: dict[str, Any] | None = None  # for lineage, once executed
        self._kafka_bootstrap: str | None = None

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot

        spec = self.spec
        self.log.info("snapshot of stream %s from %s into %s", spec.name, spec.checkpoint, spec.store)
        self._kafka_bootstrap, kafka = self.kafka_settings(required=False)
        with self.cancellable():
            result = create_snapshot(
                spec.checkpoint, self.hook.store, spec.name,
                batch_id=None if self.batch_id in (None, "") else int(self.batch_id),
                labels=dict(self.labels or {}), parallelism=self.parallelism, spark_version=spec.spark_version,
                always=self.always, checkpoint_connection=self.checkpoint_connection(spec.checkpoint),
                kafka_bootstrap=self._kafka_bootstrap, kafka_config=kafka or None,
            )
        out = result.to_json()
        self.log.info(
            "%s %s: batch %s, %s bytes uploaded", "reused" if result.reused else "published",
            out["snapshot_id"], out["batch_id"], out["bytes_uploaded"],
        )
        emit(context, self.outlets, SNAPSHOTS, snapshots_asset(spec.name, spec.store), {
            "stream": spec.name, "store": spec.store, **{k: out[k] for k in (
                "snapshot_id", "batch_id", "timeline", "bytes_total", "bytes_uploaded", "reused")},
        })
        self._result = out
        return out

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """Inputs: the checkpoint and the Kafka topics its batches read (when the spec names
        the cluster); output: the stream's snapshots in the store, versioned by snapshot id."""
        from airflow_provider_streamstate.utils.openlineage import empty_lineage, snapshot_lineage

        if self._result is None:
            return empty_lineage()
        return snapshot_lineage(checkpoint=self.spec.checkpoint, store=self.spec.store, result=self._result,
                                kafka_bootstrap=self._kafka_bootstrap)


class RestoreSnapshotOperator(StreamTask):
    """Restore a snapshot as a checkpoint: the stream's own (a rollback) or another directory.

    Refused while the stream runs on the target. Restoring a snapshot that is not the
    newest of the current timeline starts a new timeline. Returns `{"snapshot_id",
    "stream", "batch_id", "target", "files", "bytes", "query_id", "clone", "timeline",
    "new_timeline", "kafka_offsets", "seconds"}`.

    :param stream: the stream (a StreamSpec or its dict). (templated)
    :param snapshot: a snapshot id or `latest`. (templated)
    :param labels: with `latest`, the newest snapshot carrying these labels. (templated)
    :param target: where to write the checkpoint; default the stream's checkpoint. (templated)
    :param force: replace a non-empty target (needed to roll back in place).
    :param new_query_id: give the copy a fresh query id (a clone).
    :param parallelism: concurrent file transfers.
    """

    template_fields: Sequence[str] = ("stream", "snapshot", "labels", "target")

    def __init__(
        self, *, snapshot: str = "latest", labels: dict[str, str] | None = None, target: str | None = None,
        force: bool = False, new_query_id: bool = False, **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.snapshot = snapshot
        self.labels = labels
        self.target = target
        self.force = force
        self.new_query_id = new_query_id

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_streamstate.engine.catalog.snapshots import resolve_snapshot
        from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot

        spec = self.spec
        target = self.target or spec.checkpoint
        with self.cancellable():
            manifest = resolve_snapshot(self.hook.store, spec.name, self.snapshot, labels=self.labels or None)
            self.log.info("restoring %s of %s (batch %d) to %s", manifest.snapshot_id, spec.name, manifest.batch_id, target)
            result = restore_snapshot(
                self.hook.store, spec.name, manifest.snapshot_id, target, force=self.force,
                new_query_id=self.new_query_id, parallelism=self.parallelism,
                connection=self.checkpoint_connection(target),
            )
        return result.to_json()


class VerifySnapshotsOperator(StreamTask):
    """Re-hash every blob of one snapshot (or all of a stream's) against its sha256.

    A damaged snapshot fails the task at once, naming the files (a retry cannot repair it).
    Returns `{"stream", "snapshots" (how many were checked), "ok", "blobs_checked",
    "bytes_checked", "problems", "seconds"}`.

    :param stream: the stream (a StreamSpec or its dict). (templated)
    :param snapshot: a snapshot id or `latest`; default every snapshot. (templated)
    :param parallelism: concurrent reads.
    """

    template_fields: Sequence[str] = ("stream", "snapshot")

    def __init__(self, *, snapshot: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.snapshot = snapshot

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_streamstate.engine.catalog.snapshots import no_snapshots_error, resolve_snapshot
        from airflow_provider_streamstate.engine.catalog.verify import verify_snapshots

        spec = self.spec
        with self.cancellable():
            store = self.hook.store
            snapshot_id = resolve_snapshot(store, spec.name, self.snapshot).snapshot_id if self.snapshot else None
            if snapshot_id is None and not store.list_snapshot_ids(spec.name):
                raise no_snapshots_error(store, spec.name)
            result = verify_snapshots(store, spec.name, snapshot_id, parallelism=self.parallelism)
        if not result.ok:
            raise AirflowFailException(result.summary())
        self.log.info("verified %d blobs (%d bytes) of %s", result.blobs_checked, result.bytes_checked, spec.name)
        out = result.to_json()
        out["snapshots"] = len(out["snapshots"])  # a count: XCom stays small however long the history
        return out
