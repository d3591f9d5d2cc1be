"""Replicate a stream's snapshots to another store (the DR region): thin over the store hooks
and `engine.lifecycle.replicate`; returns a small JSON summary for XCom."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from airflow.sdk import Context

from airflow_provider_streamstate.assets.streams import REPLICAS, emit, snapshots_asset, with_outlet
from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.links.streams_ui import SnapshotLink
from airflow_provider_streamstate.operators.base import StreamstateTask, Subject
from airflow_provider_streamstate.spec import StreamSpec
from airflow_provider_streamstate.utils.configured_streams import stream_spec
from airflow_provider_streamstate.utils.renamed_arguments import current_argument
from airflow_provider_streamstate.utils.task_errors import engine_errors

XCOM_SNAPSHOTS = 20  # the newest ones handled; the totals count them all


def stream_and_store(
    stream: StreamSpec | dict[str, Any] | str, store: str | None, storage_conn_id: str | None,
) -> tuple[str, str, str | None]:
    """(stream name, store URL, storage connection id) from a stream spec (its store and connection
    are the defaults) or a bare stream name (then `store` is required)."""
    if isinstance(stream, str) and not stream.lstrip().startswith("{"):
        from airflow_provider_streamstate.engine.core.manifest import validate_stream_name

        name = validate_stream_name(stream.strip())
        if not store:
            raise UsageError(
                f"stream {name} is given by name only, so the store to read is unknown",
                hint="pass the source store (source_store=...) or a whole StreamSpec",
            )
        return name, store, storage_conn_id
    spec = stream_spec(stream)
    if store and store != spec.store:
        return spec.name, store, storage_conn_id
    return spec.name, spec.store, storage_conn_id if storage_conn_id is not None else spec.storage_conn_id


def snapshot_choice(snapshots: Any) -> tuple[list[str], bool]:
    """(ids or `latest`, all missing?) from `latest`, `all`, an id, a list of ids, or that list as JSON."""
    value = snapshots
    if isinstance(value, str) and value.strip().startswith("["):
        try:
            value = json.loads(value)
        except ValueError:
            raise UsageError(f"snapshots {snapshots!r} is not a JSON list", hint='write ["id1", "id2"]') from None
    if isinstance(value, str):
        value = value.strip()
        return ([], True) if value == "all" else ([value or "latest"], False)
    if isinstance(value, list | tuple) and value and all(isinstance(v, str) for v in value):
        return list(value), False
    raise UsageError(
        f"snapshots must be `latest`, `all`, a snapshot id or a list of ids, not {snapshots!r}",
        hint="e.g. snapshots=\"{{ ti.xcom_pull(task_ids='snapshot')['snapshot_id'] }}\"",
    )


class ReplicateSnapshotsOperator(StreamstateTask):
    """Replicate snapshots of a stream to another store (e.g. the DR region's): only blobs the
    destination lacks are copied, each verified against its sha256 as it streams, and a
    snapshot appears at the destination only once complete, under the same id. A retry
    copies only what the failed try did not. Corrupt source data and bad input fail the task
    at once (no retry); an unreachable store is retried.

    Returns `{"stream", "source", "destination", "server_side_copy", "snapshots": [{"snapshot_id",
    "batch_id", "blobs_copied", "blobs_skipped", "bytes_copied", "bytes_skipped", "blobs_refreshed",
    "seconds", "lag_seconds", "already_present", "records_copied"}], "snapshots_published",
    "blobs_copied", "blobs_skipped", "bytes_copied", "bytes_skipped", "blobs_refreshed", "seconds",
    "snapshots_handled", "standby"}`; `snapshots` lists the newest 20 handled, the totals count all
    of them; `standby` is the warm standby's update (null without `standby`).

    Each of those 20 that was published at the destination (not already there) emits an event
    on the stream's snapshots asset in the destination store (assets/streams.py; outlet: the
    `streamstate-replicas` alias) with `{"stream", "store", "source", "snapshot_id", "batch_id",
    "bytes_copied", "lag_seconds"}` as its extra; links to the newest one's page in the Streams
    UI; reports OpenLineage, source snapshots to destination snapshots (utils/openlineage.py).

    :param stream: the stream: a StreamSpec, its dict (or that as JSON), or just its name. (templated)
    :param destination_store: the store to copy into, `s3://bucket/prefix` or a local path. (templated)
    :param destination_storage_conn_id: the destination's Airflow connection (`aws` for S3,
        `streamstate_hdfs` for HDFS). (templated)
    :param source_store: the store to copy from; default the stream spec's store. (templated)
    :param source_storage_conn_id: the source's Airflow connection; default the spec's when the source
        is the spec's store. (templated)
    :param snapshots: `latest` (the newest on the source's current timeline), `all` (every
        snapshot the destination lacks), a snapshot id, or a list of ids. (templated)
    :param since: instead of `snapshots`: this snapshot and every one created after it. (templated)
    :param standby: then keep a warm standby at this checkpoint location (in the
        destination's region, reached with `destination_storage_conn_id`) holding the
        destination's newest snapshot, writing only the files that changed
        (engine.dr.standby); `{stream}` is replaced by the stream's name. Its update is in the
        result's `standby`. (templated)
    :param parallelism: concurrent blob copies.
    :param destination_aws_conn_id: the old name of `destination_storage_conn_id` (deprecated).
    :param source_aws_conn_id: the old name of `source_storage_conn_id` (deprecated).
    """

    template_fields: Sequence[str] = (
        "stream", "destination_store", "destination_storage_conn_id", "source_store", "source_storage_conn_id",
        "snapshots", "since", "standby",
    )
    operator_extra_links = (SnapshotLink(),)

    def __init__(
        self, *, stream: StreamSpec | dict[str, Any] | str, destination_store: str,
        destination_storage_conn_id: str | None = None, source_store: str | None = None,
        source_storage_conn_id: str | None = None, snapshots: str | list[str] = "latest", since: str | None = None,
        standby: str | None = None, destination_aws_conn_id: str | None = None,
        source_aws_conn_id: str | None = None, **kwargs: Any,
    ) -> None:
        destination_storage_conn_id = current_argument("destination_storage_conn_id", destination_storage_conn_id, destination_aws_conn_id,
                                                       owner=type(self).__name__)
        source_storage_conn_id = current_argument("source_storage_conn_id", source_storage_conn_id, source_aws_conn_id,
                                                  owner=type(self).__name__)
        super().__init__(**with_outlet(kwargs, REPLICAS))
        self._result: dict[str, Any] | None = None  # for lineage, once executed
        self.stream = stream
        self.destination_store = destination_store
        self.destination_storage_conn_id = destination_storage_conn_id
        self.source_store = source_store
        self.source_storage_conn_id = source_storage_conn_id
        self.snapshots = snapshots
        self.since = since
        self.standby = standby

    def subject(self) -> Subject:
        with engine_errors():
            name, source_url, source_conn = stream_and_store(self.stream, self.source_store, self.source_storage_conn_id)
        return Subject(f"stream {name}", source_url, source_conn)

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_streamstate.engine.lifecycle.replicate import replicate

        subject = self.subject()
        name, source_url = subject.name.removeprefix("stream "), subject.store
        with engine_errors():
            since = self.since or None
            ids, all_missing = ([], False) if since else snapshot_choice(self.snapshots)
            if not self.destination_store:
                raise UsageError("destination_store is required", hint="give the store to replicate into")
        self.log.info(
            "replicating %s of stream %s from %s to %s", since and f"since {since}" or ("all missing" if all_missing else ids),
            name, source_url, self.destination_store,
        )
        with self.cancellable():  # opening the stores too: an unknown connection is bad input
            destination = self.store_at(self.destination_store, self.destination_storage_conn_id)
            result = replicate(
                self.hook.store, destination, name,
                snapshots=ids, since=since, all_missing=all_missing, parallelism=self.parallelism,
            )
            standby = self._update_standby(destination, name)
        for s in result.snapshots:
            self.log.info(
                "%s: %s, %d bytes copied in %d blobs, %d bytes already there, lag %s s", s.snapshot_id,
                "already there" if s.already_present else "published", s.bytes_copied, s.blobs_copied,
                s.bytes_skipped, s.lag_seconds,
            )
        out = result.to_json()
        if len(out["snapshots"]) > XCOM_SNAPSHOTS:  # XCom stays small however long the history
            out["snapshots"] = out["snapshots"][-XCOM_SNAPSHOTS:]
        out["snapshots_handled"] = len(result.snapshots)
        out["standby"] = standby
        destination_asset = snapshots_asset(name, self.destination_store)
        for s in out["snapshots"]:
            if not s["already_present"]:
                emit(context, self.outlets, REPLICAS, destination_asset, {
                    "stream": name, "store": self.destination_store, "source": source_url,
                    **{k: s[k] for k in ("snapshot_id", "batch_id", "bytes_copied", "lag_seconds")},
                })
        self._result = out
        return out

    def _update_standby(self, destination: Any, name: str) -> dict[str, Any] | None:
        """The warm standby brought to the destination's newest snapshot (None without one)."""
        if not self.standby:
            return None
        from airflow_provider_streamstate.engine.dr.standby import update_standby
        from airflow_provider_streamstate.hooks.store import open_checkpoint

        location = str(self.standby).replace("{stream}", name)
        conn = self.destination_storage_conn_id or None  # else the destination store's own client, or the environment's
        target = open_checkpoint(location, conn, max_connections=self.parallelism * 2) if conn else location
        up = update_standby(destination, name, target, parallelism=self.parallelism)
        self.log.info("standby %s holds %s: %d file(s) written (%d bytes), %d removed, %d kept", up.location,
                      up.snapshot_id, up.files_written, up.bytes_written, up.files_removed, up.files_kept)
        return up.to_json()

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """Input: the stream's snapshots in the source; output: the same in the destination,
        versioned by the newest snapshot handled."""
        from airflow_provider_streamstate.utils.openlineage import empty_lineage, replication_lineage

        return empty_lineage() if self._result is None else replication_lineage(result=self._result)
