"""Operators over pipelines (streams linked by Kafka topics): snapshot one at a consistent
cut, validate, restore or clone it as one, fail it over to the DR region as one, replicate
and expire its snapshots as units. Thin over
the store hook, the Kafka connection and `engine.pipeline`; each returns JSON for XCom.

Every operator takes `pipeline` (operators/base.py `PipelineTask`): a dict with the engine's pipeline spec (`name`, `members`:
stream -> checkpoint, `links`: upstream/topic/downstream) plus where it lives: `store`,
`kafka_conn_id` (the cluster of the link topics) and optionally `storage_conn_id` (the store's
and the S3 checkpoints' connection), `suites` (member -> GX suite, for its validation) and
`spark_conn_id` (where that validation runs).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import Context

from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.operators.base import PipelineTask
from airflow_provider_streamstate.spec import SparkJobOptions
from airflow_provider_streamstate.utils.renamed_arguments import current_argument
from airflow_provider_streamstate.utils.task_errors import engine_errors


class SnapshotPipelineOperator(PipelineTask):
    """Snapshot every member of a running pipeline at one consistent cut, with its link
    topics' channel records (docs/concepts.md, "Pipelines"). Returns `{"pipeline",
    "snapshot_id", "members", "channels", "cut_seconds", "seconds"}`.

    :param pipeline: the pipeline dict (spec, store, kafka_conn_id, storage_conn_id). (templated)
    :param wait_s: how long to wait for each upstream to be between two batches.
    :param labels: KEY=VALUE labels for the member snapshots. (templated)
    :param parallelism: concurrent file transfers.
    """

    template_fields: Sequence[str] = ("pipeline", "labels")

    def __init__(self, *, wait_s: float = 120.0, labels: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.wait_s = wait_s
        self.labels = labels

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_streamstate.engine.pipeline.snapshots import create_pipeline_snapshot

        c = self.configured
        bootstrap, config = self.kafka()
        self.log.info("snapshot of pipeline %s (%s) into %s", c.spec.name, ", ".join(c.spec.order()), c.store)
        with self.cancellable():
            result = create_pipeline_snapshot(c.spec, self.hook.store, bootstrap, kafka_config=config or None,
                                              checkpoint_connection=self.members_connection(), wait_s=self.wait_s,
                                              parallelism=self.parallelism, labels=dict(self.labels or {}))
        return result.to_json()


class RestorePipelineOperator(PipelineTask):
    """Restore a pipeline snapshot in place (every member stopped; each link's channel
    appended to its topic, the downstream resuming there), or, with `clone`, as new streams
    on new link topics. Returns `{"pipeline", "snapshot_id", "checkpoints", "resume",
    "channel_records", "topics", "seconds"}`.

    :param pipeline: the pipeline dict (spec, store, kafka_conn_id, storage_conn_id). (templated)
    :param snapshot: a pipeline snapshot id or `latest`. (templated)
    :param clone: `{"suffix": ..., "checkpoints": {member: location}, "topics": {link: new},
        "ttl_s": seconds}`: restore as a clone (members `<member>-<suffix>`, topics
        `<link>-<suffix>` unless given); None restores in place. (templated)
    :param parallelism: concurrent file transfers.
    """

    template_fields: Sequence[str] = ("pipeline", "snapshot", "clone")

    def __init__(self, *, snapshot: str = "latest", clone: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.snapshot = snapshot
        self.clone = clone

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_streamstate.engine.core.config.values import optional_duration
        from airflow_provider_streamstate.engine.pipeline.restore import PipelineClone, restore_pipeline
        from airflow_provider_streamstate.engine.pipeline.snapshots import get_pipeline_snapshot

        c = self.configured
        bootstrap, config = self.kafka()
        with self.cancellable():
            snap = get_pipeline_snapshot(self.hook.store, c.spec.name, self.snapshot)
            clone = None
            if self.clone:
                clone = PipelineClone.with_suffix(
                    snap, str(self.clone["suffix"]), dict(self.clone["checkpoints"]),
                    topics=self.clone.get("topics"), ttl_s=optional_duration(self.clone.get("ttl_s"), "ttl_s"),
                    kafka_conn_id=c.kafka_conn_id)  # expiry deletes its topics there
            self.log.info("restoring pipeline %s at %s%s", c.spec.name, snap.snapshot_id, " as a clone" if clone else "")
            targets = clone.checkpoints.values() if clone else c.spec.members.values()
            connection = next((x for x in map(self.checkpoint_connection, targets) if x is not None), None)
            result = restore_pipeline(self.hook.store, snap, bootstrap, clone=clone, kafka_config=config or None,
                                      connection=connection, parallelism=self.parallelism)
        return result.to_json()


class ValidatePipelineOperator(PipelineTask):
    """Validate a pipeline snapshot as a unit: each member's Great Expectations suite on its
    member snapshot, results recorded beside each (engine.pipeline.validation). The pipeline
    snapshot is known-good (`latest-good`) only when every member passed. Without
    `spark_conn_id` the suites run in the task on a local Spark session; with it, all of them
    run as one Spark application on that connection's cluster. Fails the task (no retry) when
    a suite fails, unless `fail_on_failure` is False. Returns `{"pipeline", "snapshot_id",
    "success", "members": {member: {"snapshot_id", "suite", "success", "reused"}}}`.

    :param pipeline: the pipeline dict (spec, store, kafka_conn_id, storage_conn_id, and its
        `suites` and `spark_conn_id` unless given here). (templated)
    :param suites: `{member: suite}`, each a GX suite JSON file or the suite as a dict; one
        per member; default the pipeline's. (templated)
    :param snapshot: a pipeline snapshot id or `latest`. (templated)
    :param fail_on_failure: fail the task when a suite fails (False: only record).
    :param spark: where the suites' Spark application runs (`SparkJobOptions` or its dict;
        see operators/base.py `StateTask`); default the pipeline's `spark_conn_id`. (templated)
    :param parallelism: concurrent blob reads while the snapshots are laid out.
    """

    template_fields: Sequence[str] = ("pipeline", "suites", "snapshot", "spark")

    def __init__(self, *, suites: dict[str, str | dict[str, Any]] | None = None, snapshot: str = "latest",
                 fail_on_failure: bool = True, spark: SparkJobOptions | dict[str, Any] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.suites = suites
        self.snapshot = snapshot
        self.fail_on_failure = fail_on_failure
        self.spark = spark

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowFailException

        from airflow_provider_streamstate.engine.pipeline.snapshots import get_pipeline_snapshot
        from airflow_provider_streamstate.engine.pipeline.validation import validate_pipeline
        from airflow_provider_streamstate.engine.state.validation import load_suite

        c = self.configured
        store = self.hook.store
        with engine_errors():
            spark = SparkJobOptions.of(self.spark) if self.spark else SparkJobOptions(conn_id=c.spark_conn_id)
        with self.cancellable():
            given = self.suites or c.suites
            if not given:
                raise UsageError(f"pipeline {c.spec.name} names no suites to validate with",
                                 hint="pass suites={member: suite}, or add suites to the pipeline dict")
            suites = {m: load_suite(s, check=not spark.on_cluster) for m, s in dict(given).items()}
            snap = get_pipeline_snapshot(store, c.spec.name, self.snapshot)
            self.log.info("validating pipeline snapshot %s of %s (%s)", snap.snapshot_id, c.spec.name,
                          ", ".join(f"{m}: {s.name}" for m, s in suites.items()))
            result = validate_pipeline(snap, suites, store.url, lambda r: self.run_state_request(r, spark))
        out = result.to_json()
        for member, m in out["members"].items():
            self.log.info("%s: %s suite %s %s%s", member, m["snapshot_id"], m["suite"],
                          "passed" if m["success"] else "FAILED", " (stored result)" if m["reused"] else "")
        if not result.success and self.fail_on_failure:
            failed = ", ".join(f"{s} ({m['suite']})" for s, m in out["members"].items() if not m["success"])
            raise AirflowFailException(f"pipeline snapshot {snap.snapshot_id} of {c.spec.name} failed validation: "
                                       f"{failed}")
        return out


class FailoverPipelineOperator(PipelineTask):
    """Resume a whole pipeline in the DR region from one pipeline snapshot in the DR store:
    each member's source topics translated through the mirror (as FailoverStreamOperator
    does), each link's channel appended to the DR link topic and its downstream resuming
    there, so the DR pipeline reads every record once (engine.pipeline.failover). The
    snapshot is the given one, else the newest whose every member translates (known-good
    only with `good_only`). Fence the primary members first. Returns `{"pipeline",
    "snapshot_id", "members", "channel_records", "skipped_snapshots", "seconds"}`.

    :param pipeline: the pipeline as it runs in DR: `members` map to the DR checkpoints (new
        or empty), `store` is the DR store, `kafka_conn_id` the DR cluster. (templated)
    :param snapshot: a pipeline snapshot id, `latest` or `latest-good`; default the newest
        that translates. (templated)
    :param topic_map: DR names of source topics, `{"SRC": "DST"}` or a list of `SRC=DST`;
        they win over the replication policy. (templated)
    :param replication_policy: the mirror's naming: `default` (`<source alias>.<topic>`) or
        `identity`. (templated)
    :param source_alias: the primary cluster's alias in MirrorMaker 2. (templated)
    :param link_topics: `{link: DR topic}` where a link's upstream writes in DR; default
        the link's own name. (templated)
    :param good_only: without `snapshot`, only pipeline snapshots whose every member passed
        its validations.
    :param parallelism: concurrent file transfers.
    """

    template_fields: Sequence[str] = ("pipeline", "snapshot", "topic_map", "replication_policy", "source_alias",
                                      "link_topics")

    def __init__(self, *, snapshot: str | None = None, topic_map: dict[str, str] | list[str] | None = None,
                 replication_policy: str = "default", source_alias: str = "primary",
                 link_topics: dict[str, str] | None = None, good_only: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.snapshot = snapshot
        self.topic_map = topic_map
        self.replication_policy = replication_policy
        self.source_alias = source_alias
        self.link_topics = link_topics
        self.good_only = good_only

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_streamstate.engine.dr.failover import TopicMap
        from airflow_provider_streamstate.engine.pipeline.failover import failover_pipeline

        c = self.configured
        bootstrap, config = self.kafka()
        with engine_errors():
            topic_map = TopicMap.of(self.topic_map, self.replication_policy, self.source_alias)
        self.log.info("failover of pipeline %s from %s for %s", c.spec.name, c.store, bootstrap)
        with self.cancellable():
            result = failover_pipeline(self.hook.store, c.spec.name, dict(c.spec.members), bootstrap,
                                       snapshot=self.snapshot or None, topic_map=topic_map,
                                       link_topics=dict(self.link_topics or {}), good_only=bool(self.good_only),
                                       kafka_config=config or None, connection=self.members_connection(),
                                       parallelism=self.parallelism)
        out = result.to_json()
        for skipped in out["skipped_snapshots"]:
            self.log.info("skipped %s: %s", skipped["snapshot_id"], skipped["reason"])
        return out


class ReplicatePipelineOperator(PipelineTask):
    """Replicate a pipeline's snapshots to another store as units (a pipeline snapshot is
    published there only once every member and channel is). Returns `{"pipeline",
    "published", "already_present", "member_snapshots_published", "seconds"}`.

    :param pipeline: the pipeline dict (spec, store, kafka_conn_id, storage_conn_id). (templated)
    :param destination_store: the store to copy into. (templated)
    :param destination_storage_conn_id: its Airflow connection. (templated)
    :param parallelism: concurrent file transfers.
    :param destination_aws_conn_id: the old name of `destination_storage_conn_id` (deprecated).
    """

    template_fields: Sequence[str] = ("pipeline", "destination_store", "destination_storage_conn_id")

    def __init__(self, *, destination_store: str, destination_storage_conn_id: str | None = None,
                 destination_aws_conn_id: str | None = None, **kwargs: Any) -> None:
        destination_storage_conn_id = current_argument("destination_storage_conn_id", destination_storage_conn_id,
                                                       destination_aws_conn_id, owner=type(self).__name__)
        super().__init__(**kwargs)
        self.destination_store = destination_store
        self.destination_storage_conn_id = destination_storage_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_streamstate.engine.pipeline.replicate import replicate_pipeline

        c = self.configured
        destination = self.store_at(self.destination_store, self.destination_storage_conn_id)
        with self.cancellable():
            result = replicate_pipeline(self.hook.store, destination, c.spec.name, parallelism=self.parallelism)
        return result.to_json()


class PipelineRetentionOperator(PipelineTask):
    """Keep the newest `keep_last` snapshots of a pipeline; delete the others as units (the
    record first, then channels, then the pins that kept its members). Returns
    `{"pipeline", "kept", "deleted", "pins_released", "dry_run"}`.

    :param pipeline: the pipeline dict (spec, store, kafka_conn_id, storage_conn_id). (templated)
    :param keep_last: how many of the newest pipeline snapshots to keep. (templated)
    :param store: another store to apply it in (e.g. the DR store); default the pipeline's. (templated)
    :param storage_conn_id: that store's Airflow connection. (templated)
    :param dry_run: say what would be deleted; delete nothing.
    :param parallelism: concurrent file transfers.
    :param aws_conn_id: the old name of `storage_conn_id` (deprecated).
    """

    template_fields: Sequence[str] = ("pipeline", "keep_last", "store", "storage_conn_id")

    def __init__(self, *, keep_last: int | str, store: str | None = None, storage_conn_id: str | None = None,
                 dry_run: bool = False, aws_conn_id: str | None = None, **kwargs: Any) -> None:
        storage_conn_id = current_argument("storage_conn_id", storage_conn_id, aws_conn_id,
                                           owner=type(self).__name__)
        super().__init__(**kwargs)
        self.keep_last = keep_last
        self.store = store
        self.storage_conn_id = storage_conn_id
        self.dry_run: Any = dry_run

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_streamstate.engine.core.config.values import parse_flag
        from airflow_provider_streamstate.engine.pipeline.retention import apply_pipeline_retention

        c = self.configured
        store = self.store_at(self.store, self.storage_conn_id) if self.store else self.hook.store
        with self.cancellable():
            result = apply_pipeline_retention(store, c.spec.name, keep_last=int(self.keep_last),
                                              dry_run=parse_flag(self.dry_run, "dry_run"))
        return result.to_json()
