"""What every streamstate operator shares, resolved once: the stream (or pipeline) it works
on, the store hook, the connection its checkpoints are reached with, its Kafka settings,
and for state jobs where their Spark application runs.

`StreamstateTask` is the one base: it turns engine errors into Airflow's, cancels engine
work on kill, and resolves connections; a subclass says what it works on (`subject()`).
`StreamTask` works on one stream (`stream`: a StreamSpec, its dict, or its JSON), a
`PipelineTask` on a pipeline (`pipeline`: its spec and where it lives), a store task on a
store URL it is given. Connections are passed to the engine with what they open (a store, a checkpoint's
filesystem), never left in a process-wide cache for later calls to find.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_provider_streamstate.engine.core.config.renamed import with_current_names
from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.hooks.store import StreamstateStoreHook
from airflow_provider_streamstate.spec import SparkJobOptions, StreamSpec
from airflow_provider_streamstate.utils.configured_streams import stream_spec
from airflow_provider_streamstate.utils.task_errors import CancellableTask, engine_errors

if TYPE_CHECKING:
    from airflow_provider_streamstate.engine.checkpoint.filesystems import CheckpointFS
    from airflow_provider_streamstate.engine.checkpoint.sidecar import Sidecar
    from airflow_provider_streamstate.engine.stores.base import SnapshotStore


@dataclass(frozen=True)
class Subject:
    """Where a task's stream or pipeline lives: its store and the connections to reach it."""

    name: str
    store: str
    storage_conn_id: str | None = None  # the store's, and S3 and HDFS checkpoints'
    kafka_conn_id: str | None = None


class StreamstateTask(CancellableTask, BaseOperator):
    """The base of the streamstate operators (see the module docstring).

    :param parallelism: concurrent transfers (an S3 connection pool is twice as large).
    """

    def __init__(self, *, parallelism: int = 8, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.parallelism = parallelism

    def subject(self) -> Subject:
        """What this task works on; resolved (and checked) when the task runs."""
        raise NotImplementedError

    @cached_property
    def hook(self) -> StreamstateStoreHook:
        """The subject's store, through its connection."""
        s = self.subject()
        return StreamstateStoreHook(s.store, storage_conn_id=s.storage_conn_id, parallelism=self.parallelism)

    def store_at(self, url: str, storage_conn_id: str | None) -> SnapshotStore:
        """Another store (a replication's destination, the DR store), through its connection."""
        with engine_errors():
            return StreamstateStoreHook(url, storage_conn_id=storage_conn_id or None, parallelism=self.parallelism).store

    def checkpoint_connection(self, location: str) -> Any:
        """The connection a checkpoint location of the subject is reached with (the subject's
        `aws` one for S3, `streamstate_hdfs` for HDFS); None: the store's own or the environment's."""
        from airflow_provider_streamstate.hooks.store import checkpoint_connection

        with engine_errors():
            return checkpoint_connection(location, self.subject().storage_conn_id, max_connections=self.parallelism * 2)

    def checkpoint(self, location: str) -> CheckpointFS:
        """A checkpoint location's filesystem, opened with the subject's connection."""
        from airflow_provider_streamstate.hooks.store import open_checkpoint

        with engine_errors():
            return open_checkpoint(location, self.subject().storage_conn_id, max_connections=self.parallelism * 2)

    def records(self, location: str) -> Sidecar:
        """The records beside a checkpoint location (launch, driver, heartbeat, stop request),
        opened once with the subject's connection for every step of this task."""
        from airflow_provider_streamstate.engine.checkpoint.sidecar import open_sidecar

        return open_sidecar(self.checkpoint(location))

    def run_state_request(self, request: Any, spark: SparkJobOptions) -> dict[str, Any]:
        """One state job (a batch of them too), in the task on a local Spark session, or as
        one application through `spark`'s connection (engine/state/submit.py)."""
        if not spark.on_cluster:
            from airflow_provider_streamstate.engine.state.jobs import run_state_job
            from airflow_provider_streamstate.engine.state.reader import StateReader

            with StateReader(self.hook.store, parallelism=self.parallelism) as reader:
                result: dict[str, Any] = run_state_job(request, reader)
                return result
        from airflow_provider_streamstate.streams.state_jobs import run_state_job_on_cluster

        return run_state_job_on_cluster(request, self.hook.store, spark, log=self.log)

    def kafka_settings(self, conn_id: str | None = None, *, required: bool = True) -> tuple[str | None, dict[str, Any]]:
        """(bootstrap servers, the rest of the client config) of the Kafka connection
        `conn_id` (default the subject's); (None, {}) when there is none and it is optional."""
        from airflow_provider_streamstate.hooks.kafka import StreamKafkaHook

        s = self.subject()
        conn = conn_id or s.kafka_conn_id
        with engine_errors():
            if not conn:
                if not required:
                    return None, {}
                raise UsageError(f"{s.name} names no Kafka connection",
                                 hint="give it kafka_conn_id: the Airflow connection of its Kafka cluster")
            config = StreamKafkaHook(kafka_config_id=conn).client_config()
        return str(config.pop("bootstrap.servers")), config


class StreamTask(StreamstateTask):
    """A task on one stream. Killing the task also kills a driver it was starting (a
    half-started stream nobody waits for is worse than none).

    :param stream: the stream, a `StreamSpec` or its `to_dict()` (or that as JSON). (templated)
    :param parallelism: concurrent transfers.
    """

    template_fields: Sequence[str] = ("stream",)

    def __init__(self, *, stream: StreamSpec | dict[str, Any] | str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stream = stream
        self._starting: Any = None

    @cached_property
    def spec(self) -> StreamSpec:
        with engine_errors():
            return stream_spec(self.stream)

    def subject(self) -> Subject:
        spec = self.spec
        return Subject(f"stream {spec.name}", spec.store, spec.storage_conn_id, spec.kafka_conn_id)

    def start_stream(self, spec: StreamSpec, startup_timeout_s: float, checkpoint: Sidecar | None = None
                     ) -> tuple[Any, Any, bool]:
        """Launch `spec` (or reconnect to it) and wait until its query runs (streams/start.py);
        `checkpoint`: the records beside its checkpoint, when this task opened them already."""
        from airflow_provider_streamstate.streams.start import start_stream

        def remember(handle: Any) -> None:
            self._starting = handle

        try:
            return start_stream(spec, startup_timeout_s=startup_timeout_s, log=self.log, on_launch=remember,
                                checkpoint=checkpoint)
        finally:
            self._starting = None

    def on_kill(self) -> None:
        super().on_kill()
        handle = self._starting
        if handle is not None:
            from airflow_provider_streamstate.engine.streams import launcher

            self.log.info("killing the driver of %s (pid %d), still starting", handle.stream, handle.pid)
            launcher.stop(handle, timeout_s=0, checkpoint=self.checkpoint(handle.checkpoint))


@dataclass(frozen=True)
class ConfiguredPipeline:
    """A pipeline spec and where it lives, as the operators take it."""

    spec: Any  # engine.pipeline.spec.PipelineSpec
    store: str
    kafka_conn_id: str | None
    storage_conn_id: str | None
    suites: dict[str, Any] | None = None  # member -> a GX suite file or dict
    spark_conn_id: str | None = None

    @classmethod
    def of(cls, value: dict[str, Any] | str) -> ConfiguredPipeline:
        from airflow_provider_streamstate.engine.pipeline.spec import PipelineSpec

        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                raise UsageError(f"pipeline {str(value)[:60]!r} is not a JSON object",
                                 hint="pass a dict: name, members, links, store, kafka_conn_id") from None
        if not isinstance(value, dict) or not isinstance(value.get("store"), str):
            raise UsageError("a pipeline for the operators needs its `store`",
                             hint="add store (file:///... or s3://bucket/prefix) to the pipeline dict")
        value = with_current_names(value, what=f"pipeline {value.get('name')}")
        spec = PipelineSpec.from_json({k: value.get(k) for k in ("name", "members", "links")}, "pipeline")
        suites = value.get("suites") or None
        if suites is not None and not isinstance(suites, dict):
            raise UsageError(f"pipeline {spec.name}: suites must map members to GX suites",
                             hint='e.g. "suites": {"totals": "/suites/totals.json"}')
        return cls(spec, value["store"], value.get("kafka_conn_id") or None, value.get("storage_conn_id") or None,
                   suites, value.get("spark_conn_id") or None)


class PipelineTask(StreamstateTask):
    """A task on one pipeline (operators/base.py: store hook, checkpoint connection, Kafka).

    :param pipeline: the pipeline dict (spec, store, kafka_conn_id, storage_conn_id). (templated)
    :param parallelism: concurrent file transfers.
    """

    template_fields: Sequence[str] = ("pipeline",)

    def __init__(self, *, pipeline: dict[str, Any] | str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pipeline = pipeline

    @cached_property
    def configured(self) -> ConfiguredPipeline:
        with engine_errors():
            return ConfiguredPipeline.of(self.pipeline)

    def subject(self) -> Subject:
        c = self.configured
        return Subject(f"pipeline {c.spec.name}", c.store, c.storage_conn_id, c.kafka_conn_id)

    def kafka(self) -> tuple[str, dict[str, Any]]:
        """(bootstrap servers, the rest of the client config) of the link topics' cluster."""
        bootstrap, config = self.kafka_settings()
        assert bootstrap is not None
        return bootstrap, config

    def members_connection(self) -> Any:
        """The connection the members' checkpoints are reached with (the pipeline's storage
        connection); None: each location's default."""
        locations = list(self.configured.spec.members.values())
        return next((c for c in map(self.checkpoint_connection, locations) if c is not None), None)


class StateTask(StreamTask):
    """A task that reads a snapshot's state with Spark: which state, and where its Spark
    application runs.

    Without a Spark connection (`spark=None`) the job runs in the task, on a local Spark
    session, with the snapshot copied to the worker's disk (the embedded default, fine for
    small state). With one, the job is a Spark application submitted to that connection's
    master (YARN, Kubernetes, standalone, local; client or cluster deploy mode): the
    snapshot is laid out in the store's scratch area and read by the executors, and the
    task only waits for the small result (engine/state/submit.py).

    :param stream: the stream, a `StreamSpec` or its `to_dict()`. (templated)
    :param operator: the stateful operator's id or name (default 0). (templated)
    :param store_name: one named state store of the operator. (templated)
    :param join_side: `left` or `right` of a stream-stream join. (templated)
    :param state_var: a transformWithState operator's state variable, `*` for all of them,
        `$timers`. (templated)
    :param spark: where the job's Spark application runs: `SparkJobOptions` (or its dict:
        `conn_id`, `deploy_mode`, `conf`, `jars`, `env`, `timeout`). (templated)
    :param parallelism: concurrent blob copies while a snapshot is laid out.
    """

    template_fields: Sequence[str] = ("stream", "operator", "store_name", "join_side", "state_var", "spark")

    def __init__(
        self, *, operator: int | str | None = None, store_name: str | None = None, join_side: str | None = None,
        state_var: str | None = None, spark: SparkJobOptions | dict[str, Any] | None = None, **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.operator = operator
        self.store_name = store_name
        self.join_side = join_side
        self.state_var = state_var
        self.spark = spark

    @property
    def spark_options(self) -> SparkJobOptions:
        with engine_errors():
            return SparkJobOptions.of(self.spark)

    @property
    def on_cluster(self) -> bool:
        return self.spark_options.on_cluster

    def selector(self) -> Any:
        from airflow_provider_streamstate.engine.state.reader import StateSelector

        return StateSelector(self.operator if self.operator not in ("", None) else None,
                             self.store_name or None, self.join_side or None, self.state_var or None)

    def run_job(self, **fields: Any) -> dict[str, Any]:
        """Answer one state job (engine/state/jobs.py) here or on the cluster; its result."""
        from airflow_provider_streamstate.engine.state.jobs import StateJobRequest

        fields.setdefault("stream", self.spec.name)
        request = StateJobRequest(store=self.hook.store.url, selector=self.selector().to_json(), **fields)
        return self.run_state_request(request, self.spark_options)
