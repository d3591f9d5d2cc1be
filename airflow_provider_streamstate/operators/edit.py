"""Offline edits of a stream's state as Airflow tasks: repairing keys (StateEditOperator)
and bootstrapping a new checkpoint's state from a table (StateBootstrapOperator); thin over
streams/edit.py and engine/edit/."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import Context

from airflow_provider_streamstate.engine.core.config.values import optional_duration, parse_flag
from airflow_provider_streamstate.operators.base import StreamTask
from airflow_provider_streamstate.utils.task_errors import engine_errors


class StateEditOperator(StreamTask):
    """Delete keys of a stream's state or set their values, in place of a rollback and a
    replay, on a verified copy: batch N+1 written beside snapshot N with N's offsets (the
    stream resumes where it was), checked without Spark (every other entry as it was, each
    changed key read back) and by Spark's own state reader in the stream's Spark, then put in
    place of the stopped stream's checkpoint behind a fence (the source snapshot pinned: a
    rollback is one restore of it) and snapshotted (labels `edited-from`, `edit`,
    `edited-by`), or written as a clone at `target` for a test first. Without `apply`,
    only what would change is returned. A running stream (in place), a source the checkpoint has
    moved past, an edit that changes nothing or state an edit cannot write fail the task
    without retries, with nothing changed. Returns the engine's EditResult.to_json
    (`source_snapshot`, `edited_snapshot`, `edit_batch`, `checkpoint`, `in_place`,
    `pinned`, `preview`, `spark`, `verified`, `stores`, `seconds`, ...).

    :param stream: the stream, a `StreamSpec` or its `to_dict()`. (templated)
    :param edit: the edit: `{"operator", "store", "delete", "delete_where", "set"}` or a
        list of them, as a dict, a list or JSON text (docs/state.md). (templated)
    :param transform: instead of `edit`, a function of (key, value), or `module:function`
        importable on the worker, giving each key's new value (or some of its columns),
        None to delete the key, or the value unchanged; its answers are the edit. (templated)
    :param migrate_to: instead of `edit`, a checkpoint the new query version wrote: every
        key of the operator's store is rewritten into that version's value schema (columns
        kept or widened by name, new ones from `defaults` or null, dropped ones gone) and
        its schema file replaces the store's, so the new version starts on the state
        (docs/state.md). (templated)
    :param defaults: with `migrate_to`: new columns' values for the existing keys. (templated)
    :param pairs: with `migrate_to`: for a new column, the state's column it continues
        (`{"sum#2": "sum"}`); needed where a name repeats (two aggregates of one function:
        `sum`, `sum#2`, ... in the query's order), which is not paired by name. (templated)
    :param where: with `transform`: only the keys whose value (and `key.<column>`) satisfy
        this condition are given to it. (templated)
    :param operator: with `transform` or `migrate_to`: the stateful operator's id (or, for a
        transform, its name). (templated)
    :param store_name: with `transform` or `migrate_to`: the operator's state store. (templated)
    :param description: what the edit repairs (the result's snapshot is labelled with it;
        default: counts of the keys). (templated)
    :param snapshot: the source snapshot: an id, `latest` or `latest-good:<suite>`; default
        a new snapshot of the stopped stream (in place: it must be the checkpoint's newest
        batch). (templated)
    :param target: write the edited state as a clone at this checkpoint instead of in
        place. (templated)
    :param clone_name: the clone's name in the store (default `<stream>-edited`). (templated)
    :param apply: write the edit (False: a dry run, which only reads and returns what would
        change).
    :param spark_check: have Spark's state reader check the edited copy (Spark 4.0+), as a
        Spark application through the stream's own Spark settings; False on Spark 3.5, which
        has none (the verification without Spark runs all the same); a bool, or text that
        says it (`false`). (templated)
    :param requested_by: who asked, for the `edited-by` label (default: the DAG run's
        triggering user, else the DAG and run). (templated)
    :param timeout: how long Spark's check may run before it is killed (a timedelta or
        seconds; None: no limit). (templated)
    :param verify: how the copy is proved before it is used: `changes` (from what the edit
        wrote: the source's files unchanged, the new files decoded; its cost follows the
        edit) or `state` (digests of the whole state before and after; a migration always
        does this). (templated)
    """

    template_fields: Sequence[str] = ("stream", "edit", "transform", "migrate_to", "defaults", "pairs", "where",
                                      "operator", "store_name", "description", "snapshot", "target", "clone_name",
                                      "requested_by", "timeout", "spark_check", "verify")

    def __init__(
        self, *, edit: dict[str, Any] | list[Any] | str | None = None, transform: Callable[[Any, Any], Any] | str | None = None,
        migrate_to: str | None = None, defaults: dict[str, Any] | None = None,
        pairs: dict[str, str] | None = None, where: str | None = None,
        operator: int | str = 0, store_name: str = "default", description: str | None = None,
        snapshot: str | None = None, target: str | None = None, clone_name: str | None = None,
        apply: bool = True, spark_check: bool | str = True, requested_by: str | None = None,
        timeout: timedelta | float | None = None, verify: str = "changes", **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if sum(x is not None for x in (edit, transform, migrate_to)) != 1:
            raise ValueError("give StateEditOperator exactly one of edit, transform and migrate_to")
        self.edit = edit
        self.transform = transform
        self.migrate_to = migrate_to
        self.defaults = defaults
        self.pairs = pairs
        self.where = where
        self.operator = operator
        self.store_name = store_name
        self.description = description
        self.snapshot = snapshot
        self.target = target
        self.clone_name = clone_name
        self.apply = apply
        self.spark_check = spark_check
        self.requested_by = requested_by
        self.timeout = timeout
        self.verify = verify

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_streamstate.engine.core.errors import UsageError
        from airflow_provider_streamstate.engine.edit.changes import EditSpec
        from airflow_provider_streamstate.engine.edit.repair import VERIFY_BY
        from airflow_provider_streamstate.streams.edit import (
            Opened,
            edit_spec,
            migration,
            opened_for_edit,
            planned_transform,
            transform_source,
        )

        spec = self.spec
        with engine_errors():
            spark_check = parse_flag(self.spark_check, "spark_check")
            timeout_s = optional_duration(self.timeout, "timeout")
            verify = self.verify or "changes"
            if verify not in VERIFY_BY:
                raise UsageError(f"verify={verify!r} is not a way to verify an edit",
                                 hint=f"give one of {', '.join(VERIFY_BY)}")
            operator = int(self.operator) if str(self.operator).isdigit() else self.operator
            snapshot = self.snapshot or None
            edit: Any
            opened: Opened | None = None
            if self.migrate_to:
                edit = migration(spec, self.migrate_to, operator=operator, store=self.store_name or "default",
                                 defaults=dict(self.defaults or {}), description=self.description or None,
                                 pairs=dict(self.pairs or {}))
            elif self.transform is not None:  # its snapshot, its plan and the edit: one opened checkpoint
                opened = opened_for_edit(spec, parallelism=self.parallelism)
                snapshot = transform_source(spec, snapshot, bool(self.apply), opened=opened)
                edit = planned_transform(spec, self.transform, where=self.where or None, operator=operator,
                                         store=self.store_name or "default", snapshot=snapshot,
                                         description=self.description or None, opened=opened).edit
            else:
                edit = EditSpec.from_json(self.edit if isinstance(self.edit, str) else json.dumps(self.edit),
                                          self.description or None)
        where = "a dry run" if not self.apply else f"as a clone at {self.target}" if self.target else "in place"
        self.log.info("editing the state of %s (%s), %s", spec.name, edit.description, where)
        with self.cancellable():
            result = edit_spec(spec, edit, apply=bool(self.apply), snapshot=snapshot,
                               target=self.target or None, clone_name=self.clone_name or None,
                               spark_check=spark_check, requested_by=self.requested_by or _asked_by(context),
                               timeout_s=timeout_s, parallelism=self.parallelism, opened=opened,
                               verify=verify)
        p = result.preview
        self.log.info("%s %d key(s) of %s at batch %d", "would change" if result.dry_run else "changed", p.changed,
                      p.source, p.batch_id)
        for key in p.keys:
            self.log.info("  %s %s%s", key["action"], json.dumps(key["key"], sort_keys=True),
                          "" if key["action"] == "delete" else f" = {json.dumps(key['value'], sort_keys=True)}")
        if not result.dry_run:
            self.log.info("edit batch %d in %s: snapshot %s, edited from %s%s", result.edit_batch, result.checkpoint,
                          result.edited_snapshot, result.source_snapshot,
                          f"; {result.pinned} is pinned for a rollback" if result.pinned else "")
        if result.snapshot_error:
            self.log.warning("the edited state is in place, but its snapshot failed: %s", result.snapshot_error)
        return dict(result.to_json())


class StateBootstrapOperator(StreamTask):
    """Bootstrap a stream's new checkpoint from a table of its state, for a stream moved from
    another engine or rebuilt from a warehouse, without a replay: batch 0 holds the table's
    rows as one operator's state, shaped as `skeleton` (a checkpoint the stream's query
    wrote, once, on a little input), and its Kafka sources ended at `offsets`, so the stream
    starts reading there; verified without Spark (exactly the table's entries, each key
    where Spark looks for it) and by Spark's own state reader in the stream's Spark
    (docs/state.md). A separate task from StateEditOperator: it has no source snapshot,
    dry run or swap, and writes only into the stream's empty checkpoint. A checkpoint that
    is not empty, a table that does not fit the state or offsets that do not fit the query
    fail the task without retries, with nothing written. Returns the engine's
    BootstrapResult.to_json (`checkpoint`, `skeleton`, `keys`, `query_id`,
    `source_offsets`, `spark`, `stores`, `seconds`).

    :param stream: the stream, a `StreamSpec` or its `to_dict()`; its checkpoint is where
        the state is written (it must be empty). (templated)
    :param skeleton: a checkpoint the stream's query wrote (run once on a little input):
        the new checkpoint's operators, state schemas and pinned confs. (templated)
    :param table: the state's rows, `key_<field>` and `value_<field>` columns as the state
        reader names them: a `.parquet`, `.csv` or `.jsonl` file, as a path on the worker or
        an s3:// or hdfs:// URL reached with the stream's connection. (templated)
    :param offsets: per source, the offset of the next record to read:
        `[{"topic": {"0": 1200, "1": 1187}}]` (a list, one source's dict, or JSON text);
        default where the skeleton's run ended. (templated)
    :param operator: the stateful operator the table is the state of: its id or name. (templated)
    :param store_name: its state store. (templated)
    :param spark_check: have Spark's state reader check the new checkpoint (Spark 4.0+), as a
        Spark application through the stream's own Spark settings.
    :param timeout: how long Spark's check may run before it is killed (a timedelta or
        seconds; None: no limit). (templated)
    """

    template_fields: Sequence[str] = ("stream", "skeleton", "table", "offsets", "operator", "store_name", "timeout")

    def __init__(
        self, *, skeleton: str, table: str, offsets: list[Any] | dict[str, Any] | str | None = None,
        operator: int | str = 0, store_name: str = "default", spark_check: bool = True,
        timeout: timedelta | float | None = None, **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.skeleton = skeleton
        self.table = table
        self.offsets = offsets
        self.operator = operator
        self.store_name = store_name
        self.spark_check = spark_check
        self.timeout = timeout

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_streamstate.engine.edit.bootstrap import given_offsets
        from airflow_provider_streamstate.streams.edit import bootstrap_spec

        spec = self.spec
        with engine_errors():
            timeout_s = optional_duration(self.timeout, "timeout")
            offsets = given_offsets(self.offsets, "offsets")
        operator = int(self.operator) if str(self.operator).isdigit() else self.operator
        self.log.info("bootstrapping %s at %s from %s, shaped as %s", spec.name, spec.checkpoint, self.table,
                      self.skeleton)
        with self.cancellable():
            result = bootstrap_spec(spec, str(self.skeleton), str(self.table), operator=operator,
                                    store=self.store_name or "default", source_offsets=offsets,
                                    spark_check=self.spark_check, timeout_s=timeout_s)
        self.log.info("bootstrapped %s: %d key(s) of operator %s at batch 0, %s; the stream starts at %s",
                      result.checkpoint, result.keys, self.operator,
                      f"Spark {result.spark['spark_version']} read it the same" if result.spark else
                      "not checked by Spark", json.dumps(result.source_offsets))
        return dict(result.to_json())


def _asked_by(context: Context) -> str:
    """The DAG run's triggering user where Airflow records one, else the DAG and run."""
    run = context.get("dag_run")
    user = getattr(run, "triggering_user_name", None) if run is not None else None
    ti = context.get("ti")
    where = f"{getattr(ti, 'dag_id', '?')}/{getattr(run, 'run_id', '?')}"
    return f"{user} ({where})" if user else where
