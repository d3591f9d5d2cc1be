"""Clone expiry as an Airflow task: thin over engine/streams/clones.py. (Clones are made by
CloneStreamOperator in operators/stream.py, which records them in the store.)"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import Context

from airflow_provider_streamstate.engine.core.config.values import parse_flag
from airflow_provider_streamstate.operators.base import StreamstateTask, Subject
from airflow_provider_streamstate.utils.renamed_arguments import current_argument
from airflow_provider_streamstate.utils.task_errors import engine_errors


class ExpireClonesOperator(StreamstateTask):
    """Tear down the clones recorded in a store whose expiry has passed: stop each clone's
    stream, delete its checkpoint directory and its snapshots, and its output topics when
    that was asked for at clone time (`delete_sinks_on_expiry`). Returns `{"store",
    "dry_run", "clones_expired", "clones_not_expired", "expired", "seconds"}`.

    :param store: the store the clones' source streams are in. (templated)
    :param storage_conn_id: the store's Airflow connection (`aws` for S3, `streamstate_hdfs` for HDFS). (templated)
    :param source_stream: only clones of this stream. (templated)
    :param kafka_conn_id: the Kafka connection for deleting topics; default the one each
        clone was recorded with. (templated)
    :param dry_run: report what would be torn down; change nothing. (templated)
    :param stop_timeout: seconds a clone's stream has to stop gracefully before it is killed.
    :param aws_conn_id: the old name of `storage_conn_id` (deprecated).
    """

    template_fields: Sequence[str] = ("store", "storage_conn_id", "source_stream", "kafka_conn_id", "dry_run")

    def __init__(
        self, *, store: str, storage_conn_id: str | None = None, source_stream: str | None = None,
        kafka_conn_id: str | None = None, dry_run: bool = False, stop_timeout: float = 120.0, aws_conn_id: str | None = None, **kwargs: Any,
    ) -> None:
        storage_conn_id = current_argument("storage_conn_id", storage_conn_id, aws_conn_id,
                                           owner=type(self).__name__)
        super().__init__(**kwargs)
        self.store = store
        self.storage_conn_id = storage_conn_id
        self.source_stream = source_stream
        self.kafka_conn_id = kafka_conn_id
        self.dry_run: Any = dry_run
        self.stop_timeout = stop_timeout

    def subject(self) -> Subject:
        return Subject(f"store {self.store}", self.store, self.storage_conn_id or None, self.kafka_conn_id or None)

    def _kafka_config(self, record: Any) -> dict[str, Any] | None:
        from airflow_provider_streamstate.engine.core.errors import UsageError
        from airflow_provider_streamstate.hooks.kafka import StreamKafkaHook

        conn = self.kafka_conn_id or record.kafka_conn_id
        if not conn:
            raise UsageError(
                f"clone {record.clone} asked for its topics to be deleted but names no Kafka connection",
                hint="give the operator kafka_conn_id",
            )
        return StreamKafkaHook(kafka_config_id=conn).client_config()

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_streamstate.engine.streams.clones import expire_clones

        with engine_errors():
            dry_run = parse_flag(self.dry_run, "dry_run")
        self.log.info("expiring clones recorded in %s%s", self.store, " (dry run)" if dry_run else "")
        with self.cancellable():
            result = expire_clones(self.hook.store, source_stream=self.source_stream or None, dry_run=dry_run,
                                   kafka_config=self._kafka_config, stop_timeout_s=float(self.stop_timeout))
        for e in result.expired:
            self.log.info("clone %s of %s (expired %s): stream %s, checkpoint deleted %s, %d snapshots, topics %s%s",
                          e.clone, e.source_stream, e.expires_at, e.stopped, e.checkpoint_deleted,
                          e.snapshots_deleted, e.topics_deleted, "".join(f"; {n}" for n in e.notes))
        return result.to_json()
