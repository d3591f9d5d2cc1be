"""Wait until a snapshot is present and complete in a store: the DR side of a replication."""

from __future__ import annotations

from typing import Any

from airflow_provider_streamstate.engine.lifecycle.replicate import ReplicaCheck
from airflow_provider_streamstate.sensors.base import StreamstateSensor
from airflow_provider_streamstate.spec import StreamSpec
from airflow_provider_streamstate.triggers.replicate import SnapshotReplicaTrigger, replica_check
from airflow_provider_streamstate.utils.renamed_arguments import current_argument
from airflow_provider_streamstate.utils.task_errors import engine_errors


class SnapshotReplicaSensor(StreamstateSensor):
    """Succeeds when a snapshot is in `store` with its manifest and every blob it references
    (a replication publishes the manifest last, so a listed snapshot that misses blobs was
    damaged afterwards: that fails the task at once). Returns `{"outcome", "snapshot_id",
    "store", "blobs", "blobs_missing", "lag_seconds"}`; `lag_seconds` is the replication lag
    the provenance record gives (None for a snapshot taken in that store).

    :param stream: the stream: a StreamSpec, its dict (or that as JSON), or just its name. (templated)
    :param store: the store to watch, e.g. the DR region's. (templated)
    :param storage_conn_id: the Airflow connection of `store` (`aws` for S3, `streamstate_hdfs` for HDFS). (templated)
    :param snapshot: a snapshot id, or `latest`: the newest on the current timeline of the
        source store. (templated)
    :param source_store: where `latest` is read; default the stream spec's store (with a bare
        stream name and no source, `latest` is the newest in `store` itself). (templated)
    :param source_storage_conn_id: the source's Airflow connection; default the spec's. (templated)
    :param deferrable: wait in the triggerer instead of a worker slot.
    :param aws_conn_id: the old name of `storage_conn_id` (deprecated).
    :param source_aws_conn_id: the old name of `source_storage_conn_id` (deprecated).
    """

    template_fields: tuple[str, ...] = ("stream", "store", "storage_conn_id", "snapshot", "source_store", "source_storage_conn_id")

    def __init__(
        self, *, stream: StreamSpec | dict[str, Any] | str, store: str, storage_conn_id: str | None = None,
        snapshot: str = "latest", source_store: str | None = None, source_storage_conn_id: str | None = None,
        aws_conn_id: str | None = None, source_aws_conn_id: str | None = None, **kwargs: Any,
    ) -> None:
        storage_conn_id = current_argument("storage_conn_id", storage_conn_id, aws_conn_id,
                                           owner=type(self).__name__)
        source_storage_conn_id = current_argument("source_storage_conn_id", source_storage_conn_id, source_aws_conn_id,
                                                  owner=type(self).__name__)
        super().__init__(**kwargs)
        self.stream = stream
        self.store = store
        self.storage_conn_id = storage_conn_id
        self.snapshot = snapshot
        self.source_store = source_store
        self.source_storage_conn_id = source_storage_conn_id

    def target(self) -> dict[str, Any]:
        """The rendered arguments of one check (and of the trigger)."""
        from airflow_provider_streamstate.operators.replicate import stream_and_store

        source_store, source_conn = self.source_store or None, self.source_storage_conn_id or None
        with engine_errors():
            if isinstance(self.stream, str) and not self.stream.lstrip().startswith("{"):
                name = stream_and_store(self.stream, source_store or self.store, source_conn)[0]
            else:
                name, source_store, source_conn = stream_and_store(self.stream, source_store, source_conn)
        return {
            "stream": name, "store": self.store, "storage_conn_id": self.storage_conn_id or None,
            "snapshot": str(self.snapshot or "latest"), "source_store": source_store, "source_storage_conn_id": source_conn,
        }

    def check(self) -> ReplicaCheck:
        return replica_check(**self.target())

    def trigger(self) -> SnapshotReplicaTrigger:
        return SnapshotReplicaTrigger(**self.target(), poke_interval=self.poke_interval)
