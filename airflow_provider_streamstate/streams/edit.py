"""Editing a stream's state from its `StreamSpec`: Spark's check of the edited copy submitted
through the spec's own Spark (its `spark` connection, master, confs, jars and environment:
the Spark the stream runs on reads what the edit wrote, as it will when the stream resumes),
its store and checkpoint reached with the spec's connection. What `streamstate state edit`
and StateEditOperator use."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from airflow_provider_streamstate.spec import StreamSpec
from airflow_provider_streamstate.utils.spark_submit import spark_submit_command

if TYPE_CHECKING:
    from airflow_provider_streamstate.engine.checkpoint.filesystems import CheckpointFS
    from airflow_provider_streamstate.engine.stores.base import SnapshotStore


class Opened(NamedTuple):
    """The connection the spec's checkpoint is reached with, the checkpoint opened with it,
    and the spec's store."""

    connection: Any
    fs: CheckpointFS
    store: SnapshotStore


def edit_check_command(spec: StreamSpec) -> Callable[[Sequence[str]], tuple[Sequence[str], Mapping[str, str]]]:
    """The spark-submit command of the edit check job with the given arguments, through the
    spec's Spark settings."""
    from airflow_provider_streamstate.engine.edit.spark_check import edit_check_application

    def command(args: Sequence[str]) -> tuple[Sequence[str], Mapping[str, str]]:
        return spark_submit_command(edit_check_application(), conn_id=spec.spark_conn_id,
                                    application_args=list(args), name=f"{spec.name}-edit-check", conf=spec.conf,
                                    jars=spec.jars, env=spec.env, master=spec.master, deploy_mode=spec.deploy_mode)

    return command


def opened_for_edit(spec: StreamSpec, *, parallelism: int = 8) -> Opened:
    """The connection the spec's checkpoint is reached with (its Airflow connection's, else
    the store's own where the checkpoint is on the store's service, as a snapshot reaches it;
    the digests' worker processes and a clone's target are reached with it too) and the
    checkpoint opened with it: resolved once per edit and handed to each of its steps
    (`opened`), a transform's snapshot and plan as well as the edit."""
    from airflow_provider_streamstate.engine.checkpoint.filesystems import open_checkpoint_fs
    from airflow_provider_streamstate.hooks.store import StreamstateStoreHook, checkpoint_connection

    store = StreamstateStoreHook(spec.store, storage_conn_id=spec.storage_conn_id, parallelism=parallelism).store
    connection = checkpoint_connection(spec.checkpoint, spec.storage_conn_id, max_connections=parallelism * 2)
    if connection is None:  # the store's own client where the checkpoint is on its service (server-side copies)
        connection = store.checkpoint_connection(spec.checkpoint)
    return Opened(connection, open_checkpoint_fs(spec.checkpoint, connection=connection, conn_id=spec.storage_conn_id),
                  store)


def _resolved(spec: StreamSpec, opened: Opened | None, parallelism: int = 8) -> Opened:
    """`opened` as the caller resolved it, else resolved here the same way."""
    return opened if opened is not None else opened_for_edit(spec, parallelism=parallelism)


def edit_spec(
    spec: StreamSpec, edit: Any, *, apply: bool = False, snapshot: str | None = None, target: str | None = None,
    clone_name: str | None = None, spark_check: bool = True, requested_by: str | None = None,
    timeout_s: float | None = None, parallelism: int = 8, on_submit: Callable[[Any], None] | None = None,
    opened: Opened | None = None, verify: str = "changes",
) -> Any:
    """`engine.edit.repair.edit_stream` for the stream `spec` describes (`edit`: an EditSpec):
    a dry run, or applied in place (the stream stopped) or as a clone at `target`.
    `opened`: the spec's checkpoint as the caller resolved it (`opened_for_edit`), else
    resolved here."""
    from airflow_provider_streamstate.engine.edit.repair import edit_stream

    connection, opened_fs, store = _resolved(spec, opened, parallelism)
    fs = opened_fs.fresh()  # a fresh view: the checkpoint as it is now
    return edit_stream(store, spec.name, spec.checkpoint, edit, apply=apply, snapshot=snapshot, target=target,
                       clone_name=clone_name, command=edit_check_command(spec) if spark_check and apply else None,
                       requested_by=requested_by, connection=connection, parallelism=parallelism,
                       timeout_s=timeout_s, on_submit=on_submit, fs=fs, verify=verify)


def transform_source(spec: StreamSpec, snapshot: str | None, apply: bool, *, opened: Opened | None = None
                     ) -> str | None:
    """The snapshot a transform is planned on and applied to: the one given, else (applied)
    a new snapshot of the stream, taken here so that the plan and the edit read the same
    batch (a running stream moves on between the two); None: a dry run of the checkpoint.
    `opened`: the spec's checkpoint as the caller resolved it (`opened_for_edit`)."""
    if snapshot or not apply:
        return snapshot
    from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot

    resolved = _resolved(spec, opened)
    return str(create_snapshot(resolved.fs.fresh(), resolved.store, spec.name, spark_version=spec.spark_version)
               .manifest.snapshot_id)


def planned_transform(
    spec: StreamSpec, transform: Any, *, where: str | None = None, operator: int | str = 0, store: str = "default",
    snapshot: str | None = None, description: str | None = None, opened: Opened | None = None,
) -> Any:
    """`engine.edit.plan.plan_transform` of the stream's state: its snapshot `snapshot`, else
    its checkpoint's newest batch (`transform_source` gives the snapshot an applied edit
    must use), read through `opened` (`opened_for_edit`) when the caller resolved it.
    `transform`: a function of (key, value), or `module:function`."""
    from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
    from airflow_provider_streamstate.engine.edit.plan import load_transform, plan_transform
    from airflow_provider_streamstate.engine.lookup.reading.sources import CheckpointSource, SnapshotSource
    from airflow_provider_streamstate.hooks.store import StreamstateStoreHook

    fn = load_transform(transform) if isinstance(transform, str) else transform
    if snapshot:
        snapshots = opened.store if opened is not None else StreamstateStoreHook(spec.store,
                                                                                storage_conn_id=spec.storage_conn_id).store
        src: Any = SnapshotSource(snapshots, spec.name, snapshot)
    else:
        src = CheckpointSource(spec.checkpoint, reader=CheckpointReader(_resolved(spec, opened).fs.fresh()))
    return plan_transform(src, fn, where=where, operator=operator, store=store, description=description,
                          name=transform if isinstance(transform, str) else None)


def migration(
    spec: StreamSpec, target: str, *, operator: int | str = 0, store: str = "default",
    defaults: dict[str, Any] | None = None, description: str | None = None, pairs: dict[str, str] | None = None,
) -> Any:
    """`engine.edit.migrate.migration_to` the schema of operator `operator` in `target` (a
    checkpoint the new query version wrote), reached with the spec's connection; `pairs`: a
    new column -> the state's column it takes, for columns of one name (docs/state.md)."""
    from airflow_provider_streamstate.engine.core.errors import UsageError
    from airflow_provider_streamstate.engine.edit.migrate import migration_to
    from airflow_provider_streamstate.hooks.store import checkpoint_connection

    if not isinstance(operator, int):
        raise UsageError(f"a migration names the operator by its id, not {operator!r}",
                         hint="0 is the query's first stateful operator; a snapshot's page in the Streams UI lists "
                         "the operators with their ids")
    return migration_to(target, operator=operator, store=store, defaults=defaults, description=description,
                        connection=checkpoint_connection(target, spec.storage_conn_id), pairs=pairs)


def bootstrap_spec(
    spec: StreamSpec, skeleton: str, table: Any, *, operator: int | str = 0, store: str = "default",
    source_offsets: list[Any] | None = None, spark_check: bool = True, timeout_s: float | None = None,
) -> Any:
    """`engine.edit.bootstrap.bootstrap_checkpoint` into the stream's (new, empty)
    checkpoint, shaped as `skeleton`, checked by Spark's state reader in the stream's Spark.
    `table`: its rows, or where the table's file is (a path, or a URL reached with the spec's
    connection)."""
    from airflow_provider_streamstate.engine.edit.bootstrap import bootstrap_checkpoint, read_table
    from airflow_provider_streamstate.hooks.store import checkpoint_connection

    rows = read_table(table, connection=checkpoint_connection(table, spec.storage_conn_id)) if isinstance(table, str) \
        else table
    return bootstrap_checkpoint(skeleton, spec.checkpoint, rows, operator=operator, store=store,
                                source_offsets=source_offsets,
                                command=edit_check_command(spec) if spark_check else None,
                                connection=checkpoint_connection(skeleton, spec.storage_conn_id),
                                target_connection=checkpoint_connection(spec.checkpoint, spec.storage_conn_id),
                                timeout_s=timeout_s)
