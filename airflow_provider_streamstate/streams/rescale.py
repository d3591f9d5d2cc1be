"""Rescaling a stream's state from its `StreamSpec`: the repartition job submitted through the
spec's own Spark (its `spark` connection, master, confs, jars and environment: the Spark the
stream runs on, since only Spark 4.2+ can repartition and the stream must read what it
wrote), its store and checkpoint reached with the spec's connection. What
RescaleStreamOperator, the `streamstate_rescale` DAG and `streamstate rescale` share."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from airflow_provider_streamstate.spec import StreamSpec
from airflow_provider_streamstate.utils.spark_submit import spark_submit_command


def rescale_command(spec: StreamSpec) -> Callable[[Sequence[str]], tuple[Sequence[str], Mapping[str, str]]]:
    """The spark-submit command of the repartition job with the given arguments, through the
    spec's Spark settings."""
    from airflow_provider_streamstate.engine.state.rescale import rescale_job_application

    def command(args: Sequence[str]) -> tuple[Sequence[str], Mapping[str, str]]:
        return spark_submit_command(rescale_job_application(), conn_id=spec.spark_conn_id, application_args=list(args),
                                    name=f"{spec.name}-rescale", conf=spec.conf, jars=spec.jars, env=spec.env,
                                    master=spec.master, deploy_mode=spec.deploy_mode)

    return command


def rescale_spec(
    spec: StreamSpec, partitions: int, *, snapshot: str | None = None, target: str | None = None,
    clone_name: str | None = None, timeout_s: float | None = None, parallelism: int = 8,
    on_submit: Callable[[Any], None] | None = None, ship_code: bool | None = None,
) -> Any:
    """`engine.state.rescale.rescale_stream` for the stream `spec` describes: in place (the
    stream stopped) or as a clone at `target`."""
    from airflow_provider_streamstate.engine.state.rescale import rescale_stream
    from airflow_provider_streamstate.hooks.store import StreamstateStoreHook, checkpoint_connection

    store = StreamstateStoreHook(spec.store, storage_conn_id=spec.storage_conn_id, parallelism=parallelism).store
    connection = checkpoint_connection(spec.checkpoint, spec.storage_conn_id, max_connections=parallelism * 2)
    return rescale_stream(store, spec.name, spec.checkpoint, partitions=partitions, command=rescale_command(spec),
                          snapshot=snapshot, target=target, clone_name=clone_name, connection=connection,
                          parallelism=parallelism, timeout_s=timeout_s, on_submit=on_submit, ship_code=ship_code)
