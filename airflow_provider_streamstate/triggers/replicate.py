"""Wait, in the triggerer, for a snapshot to be present and complete in a store
(`SnapshotReplicaSensor` deferred)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_streamstate.engine.core.config.renamed import with_current_names
from airflow_provider_streamstate.engine.lifecycle.replicate import ReplicaCheck, check_replica
from airflow_provider_streamstate.triggers.base import poll


def replica_check(
    stream: str, store: str, storage_conn_id: str | None, snapshot: str, source_store: str | None,
    source_storage_conn_id: str | None, parallelism: int = 8,
) -> ReplicaCheck:
    """One check, with the stores opened from their URLs and Airflow connections."""
    from airflow_provider_streamstate.hooks.store import StreamstateStoreHook

    target = StreamstateStoreHook(store, storage_conn_id=storage_conn_id, parallelism=parallelism).store
    source = (
        StreamstateStoreHook(source_store, storage_conn_id=source_storage_conn_id, parallelism=parallelism).store
        if source_store else None
    )
    return check_replica(target, stream, snapshot, source=source, parallelism=parallelism)


class SnapshotReplicaTrigger(BaseTrigger):
    """Fires once the snapshot is in `store` with its manifest and every blob, or at once
    when a published manifest there misses blobs (waiting cannot repair it). The stores are
    reopened from their connections on every check.

    :param stream: the stream's name.
    :param store: the store to watch (the replication's destination).
    :param storage_conn_id: the Airflow connection of `store` (`aws` for S3, `streamstate_hdfs` for HDFS).
    :param snapshot: a snapshot id, or `latest`: the newest on the current timeline of
        `source_store` (of `store` itself without one).
    :param source_store: the store `latest` is read from (the replication's source).
    :param source_storage_conn_id: the Airflow connection of `source_store`.
    :param poke_interval: seconds between two checks.

    A trigger serialized before the connections' rename (`aws_conn_id`, `source_aws_conn_id`)
    is read under the new names.
    """

    def __init__(
        self, stream: str, store: str, storage_conn_id: str | None = None, snapshot: str = "latest",
        source_store: str | None = None, source_storage_conn_id: str | None = None, poke_interval: float = 30.0,
        **renamed: Any,
    ) -> None:
        current = with_current_names({"storage_conn_id": storage_conn_id,
                                      "source_storage_conn_id": source_storage_conn_id, **renamed},
                                     what=f"replica trigger of {stream}")
        storage_conn_id, source_storage_conn_id = current.pop("storage_conn_id"), current.pop("source_storage_conn_id")
        if current:
            raise TypeError(f"unexpected argument(s) {', '.join(sorted(current))}")
        super().__init__()
        self.stream = stream
        self.store = store
        self.storage_conn_id = storage_conn_id
        self.snapshot = snapshot
        self.source_store = source_store
        self.source_storage_conn_id = source_storage_conn_id
        self.poke_interval = poke_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"stream": self.stream, "store": self.store, "storage_conn_id": self.storage_conn_id, "snapshot": self.snapshot,
             "source_store": self.source_store, "source_storage_conn_id": self.source_storage_conn_id,
             "poke_interval": self.poke_interval},
        )

    def check(self) -> ReplicaCheck:
        return replica_check(
            self.stream, self.store, self.storage_conn_id, self.snapshot, self.source_store, self.source_storage_conn_id
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        async for ev in poll(self, self.check, self.poke_interval, lambda r: f"stream {self.stream}: {r.message}"):
            yield ev
