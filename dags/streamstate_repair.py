"""Repair the keys of a stream's state that went wrong, instead of rolling back and replaying.

A bad record or a bug poisons some keys; fixing the code does not fix the state they hold.
This DAG finds the damage, repairs it on a clone first, asks a person, and only then
repairs the stream (docs/runbooks/repair.md):

1. `snapshot`, `validate`: a new snapshot of the (running) stream and the suite on it; a
   state that passes skips the rest (nothing to repair).
2. `bisect`: the first snapshot failing the suite and the last good one before it.
3. `plan`: the keys of the snapshot that failed that `where` selects (a condition on the
   value's fields and `key.<column>`), each restored to its value in the last good
   snapshot (`action: restore`; deleted where it was not there yet) or deleted
   (`action: delete`): an explicit edit, every key and value named.
4. `repair_clone`, `validate_clone`: the edit written on a clone of the failing snapshot
   (verified entry by entry and by Spark's state reader; `spark_check` false skips the
   latter, for Spark 3.5, which has none) and the suite on the clone; a clone that still
   fails stops the run, production untouched.
5. `approve`: a person approves the plan in Airflow's UI (Required Actions), which shows
   each key's value now and after the repair. Reject: the rest is skipped, nothing changed.
   Unanswered after `approval_hours` (24), `approve` fails: nothing changed either.
6. `stop`, `repair`: the stream stops at a batch boundary and the same edit is applied in
   place on a new snapshot of it (the stream may have moved on while the clone was
   checked: the named keys get the named values), verified again, swapped in behind a
   fence, the pre-repair snapshot pinned.
7. `validate_repaired`, `resume`: the suite on the repaired state, then the stream starts
   from the edit batch, where it was in Kafka.
8. `rollback` (when stop, repair, its validation or the resume failed): the pinned
   snapshot restored when the repair was put in place, and the stream started again if it
   was running before the stop; a failure before the stop leaves the stream as it was. The
   run stays failed (`repaired`, its last task, is reached only when all went through).
   `tear_down` always deletes the clone.

`stream` is a StreamSpec dict or the name of a stream in the Variable `streamstate_streams`.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import DAG, Param, task

from airflow_provider_streamstate.operators.approval import TimedApprovalOperator
from airflow_provider_streamstate.operators.bisect import BisectSnapshotsOperator
from airflow_provider_streamstate.operators.edit import StateEditOperator
from airflow_provider_streamstate.operators.snapshot import SnapshotStreamOperator
from airflow_provider_streamstate.operators.stream import StartStreamOperator, StopStreamOperator
from airflow_provider_streamstate.operators.validate import ValidateSnapshotOperator

CLONE_TTL_S = 7 * 24 * 3600  # the store's retention deletes a clone a crashed run left
APPROVAL_HOURS = 24  # unanswered by then, the approval fails and the stream is left as it was


def planned_(field: str) -> str:
    """A template for one field of the `plan` task's XCom."""
    return "{{ ti.xcom_pull(task_ids='plan')['" + field + "'] }}"


with DAG(
    dag_id="streamstate_repair",
    description="Repair the keys of a stream's state that fail a suite, on a clone first, once a person approves",
    doc_md=__doc__,
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # two repairs of one stream must never overlap
    render_template_as_native_obj=True,
    params={
        "stream": Param({}, type=["object", "string"], description="StreamSpec dict, or a configured stream's name"),
        "suite": Param({}, type=["object", "string"], description="the GX suite (a JSON file or the suite) "
                       "the state fails"),
        "where": Param("", type="string", minLength=1,
                       description="the keys that went wrong: a condition on the value and key.<column>"),
        "action": Param("restore", enum=["restore", "delete"],
                        description="restore: each key's value in the last good snapshot; delete: the keys"),
        "operator": Param(0, type=["integer", "string"], description="the stateful operator's id or name"),
        "store_name": Param("default", type="string", description="its state store"),
        "approval_hours": Param(APPROVAL_HOURS, type="number", exclusiveMinimum=0,
                                description="how long the approval waits for an answer; unanswered, the run fails "
                                            "with nothing changed"),
        "spark_check": Param(True, type="boolean", description="have Spark's state reader check each edited "
                             "copy (Spark 4.0+; false on Spark 3.5)"),
        "state_jobs": Param({}, type="object", description="where validations and bisect run "
                            "(SparkJobOptions; empty: in the task)"),
    },
    tags=["streamstate"],
) as dag:
    on_cluster = {"spark": "{{ params.state_jobs or None }}"}
    snapshot = SnapshotStreamOperator(task_id="snapshot", stream="{{ params.stream }}", always=False)
    validate = ValidateSnapshotOperator(
        task_id="validate", stream="{{ params.stream }}", suite="{{ params.suite }}",
        snapshot="{{ ti.xcom_pull(task_ids='snapshot')['snapshot_id'] }}", fail_on_failure=False, **on_cluster)

    @task
    def damage(validation: dict[str, Any]) -> dict[str, Any]:
        """Go on only when the state fails the suite."""
        from airflow.sdk.exceptions import AirflowSkipException

        if validation["success"]:
            raise AirflowSkipException(f"snapshot {validation['snapshot_id']} passes suite {validation['suite']}: "
                                       "nothing to repair")
        return validation

    bisect = BisectSnapshotsOperator(
        task_id="bisect", stream="{{ params.stream }}", suite="{{ params.suite }}",
        bad="{{ ti.xcom_pull(task_ids='snapshot')['snapshot_id'] }}", **on_cluster)

    @task
    def plan(found: dict[str, Any], params: dict[str, Any] | None = None, run_id: str | None = None,
             ti: Any = None) -> dict[str, Any]:
        """The edit that repairs the keys `where` selects in the snapshot that failed, and
        the clone it is tried on first."""
        import hashlib

        from airflow.sdk.exceptions import AirflowFailException

        from airflow_provider_streamstate.engine.edit.plan import plan_repair
        from airflow_provider_streamstate.engine.lookup.reading.sources import SnapshotSource
        from airflow_provider_streamstate.hooks.store import StreamstateStoreHook
        from airflow_provider_streamstate.utils.configured_streams import stream_spec
        from airflow_provider_streamstate.utils.task_errors import engine_errors

        p = params or {}
        with engine_errors():
            spec = stream_spec(p["stream"])
            store = StreamstateStoreHook(spec.store, storage_conn_id=spec.storage_conn_id).store
            bad = ti.xcom_pull(task_ids="snapshot")["snapshot_id"]
            good = found.get("last_good")
            if p["action"] == "restore" and not good:
                raise AirflowFailException(f"no snapshot of {spec.name} before {found.get('first_bad')} passes the "
                                           "suite: nothing to restore the keys from; repair with action delete")
            operator = p.get("operator", 0)
            repair = plan_repair(SnapshotSource(store, spec.name, bad), p["where"], action=p["action"],
                                 good=SnapshotSource(store, spec.name, good) if good else None,
                                 operator=int(operator) if str(operator).isdigit() else operator,
                                 store=p.get("store_name") or "default")
        run = hashlib.sha256(str(run_id).encode()).hexdigest()[:8]
        name = f"{spec.name}-repair-{run}"
        print(repair.markdown())
        return {"edit": repair.edit.to_json()["edits"], "description": repair.edit.description,
                "keys": len(repair.rows), "markdown": repair.markdown(), "repaired": bad,
                "first_bad": found.get("first_bad"), "last_good": good, "clone_name": name,
                "clone_checkpoint": f"{spec.checkpoint.rstrip('/')}.streamstate-repair-{run}"}

    found = plan(bisect.output)
    repair_clone = StateEditOperator(
        task_id="repair_clone", stream="{{ params.stream }}", edit=planned_("edit"),
        description=planned_("description"), snapshot="{{ ti.xcom_pull(task_ids='snapshot')['snapshot_id'] }}",
        target=planned_("clone_checkpoint"), clone_name=planned_("clone_name"), spark_check="{{ params.spark_check }}")

    @task
    def record_clone(planned: dict[str, Any], edited: dict[str, Any], params: dict[str, Any] | None = None
                     ) -> dict[str, Any]:
        """The clone labelled and recorded with an expiry, as clones are: `tear_down` (or,
        if this run dies, the store's retention) deletes its checkpoint and snapshots."""
        from airflow_provider_streamstate.engine.catalog.timeline import read_lineage
        from airflow_provider_streamstate.engine.streams import clones
        from airflow_provider_streamstate.hooks.store import StreamstateStoreHook, open_checkpoint
        from airflow_provider_streamstate.utils.configured_streams import stream_spec

        spec = stream_spec((params or {})["stream"])
        store = StreamstateStoreHook(spec.store, storage_conn_id=spec.storage_conn_id).store
        target = open_checkpoint(planned["clone_checkpoint"], spec.storage_conn_id)
        lineage = read_lineage(target)
        label = clones.CloneLabel.new(
            clone=planned["clone_name"], source_stream=spec.name, source_checkpoint=spec.checkpoint,
            snapshot_id=edited["edited_snapshot"], batch_id=edited["edit_batch"],
            query_id=lineage.query_id if lineage is not None else "", sinks={}, ttl_s=CLONE_TTL_S)
        clones.write_clone_label(target, label)
        rec = clones.record_clone(store, clone=label.clone, source_stream=spec.name, checkpoint=target.location,
                                  snapshot_id=label.snapshot_id, expires_at=label.expires_at, sinks={})
        return rec.to_json()

    validate_clone = ValidateSnapshotOperator(
        task_id="validate_clone", stream="{{ params.stream }}", snapshot_stream=planned_("clone_name"),
        suite="{{ params.suite }}", snapshot="{{ ti.xcom_pull(task_ids='repair_clone')['edited_snapshot'] }}",
        **on_cluster)
    approve = TimedApprovalOperator(
        task_id="approve", hours="{{ params.approval_hours }}",
        subject="Repair {{ ti.xcom_pull(task_ids='plan')['keys'] }} key(s) of stream "
                "{{ ti.xcom_pull(task_ids='snapshot')['stream'] }}?",
        body="{{ ti.xcom_pull(task_ids='plan')['markdown'] }}\n\nThe repaired clone passes suite "
             "{{ ti.xcom_pull(task_ids='validate_clone')['suite'] }} (snapshot "
             "{{ ti.xcom_pull(task_ids='repair_clone')['edited_snapshot'] }}). Approve to stop the stream, apply the "
             "same edit in place and resume it; reject to leave everything as it is.",
    )
    stop = StopStreamOperator(task_id="stop", stream="{{ params.stream }}", timeout=300, finish_planned_batch=True)
    repair = StateEditOperator(
        task_id="repair", stream="{{ params.stream }}", edit=planned_("edit"), description=planned_("description"),
        spark_check="{{ params.spark_check }}",
        requested_by="{{ (ti.xcom_pull(task_ids='approve') or {}).get('responded_by_user', {}).get('name', '?') }}"
                     " (approved in {{ dag.dag_id }}/{{ run_id }})")
    validate_repaired = ValidateSnapshotOperator(
        task_id="validate_repaired", stream="{{ params.stream }}", suite="{{ params.suite }}",
        snapshot="{{ ti.xcom_pull(task_ids='repair')['edited_snapshot'] }}", **on_cluster)
    resume = StartStreamOperator(task_id="resume", stream="{{ params.stream }}")

    @task(trigger_rule="one_failed")
    def rollback(params: dict[str, Any] | None = None, ti: Any = None) -> dict[str, Any]:
        """Put the stream back as it was: the pinned snapshot restored when the repair put its
        state in place, and the stream started again if it ran before the stop. Nothing when
        the run failed before the stop."""
        import logging

        from airflow_provider_streamstate.streams.start import put_back
        from airflow_provider_streamstate.utils.configured_streams import stream_spec
        from airflow_provider_streamstate.utils.task_errors import engine_errors

        # The stop's result, also when finishing the stream's planned batch failed after it.
        stopped = ti.xcom_pull(task_ids="stop") if ti is not None else None
        if not stopped:  # failed before the stop (or the stop itself did): the stream is as it was
            return {"restored": None, "started": False}
        repaired = ti.xcom_pull(task_ids="repair") if ti is not None else None
        with engine_errors():
            return put_back(stream_spec((params or {})["stream"]), (repaired or {}).get("pinned"),
                            start=stopped.get("outcome") != "not-running",
                            requested_by="streamstate_repair rollback", log=logging.getLogger("streamstate"))

    @task
    def repaired(edited: dict[str, Any], resumed: dict[str, Any]) -> dict[str, Any]:
        """The run's outcome: reached only when the repair is in place, valid and running
        (a failure anywhere before fails it, so the run stays failed after a rollback)."""
        return {"stream": edited["stream"], "edited_snapshot": edited["edited_snapshot"],
                "pinned": edited["pinned"], "edit_batch": edited["edit_batch"], "launch_id": resumed.get("launch_id")}

    @task(trigger_rule="all_done")
    def tear_down(params: dict[str, Any] | None = None, ti: Any = None) -> dict[str, Any]:
        """Delete the clone, its checkpoint and snapshots, whatever happened."""
        from airflow_provider_streamstate.engine.streams.clones import expire_clones, list_clones
        from airflow_provider_streamstate.hooks.store import (
            StreamstateStoreHook,
            checkpoint_connection,
            open_checkpoint,
        )
        from airflow_provider_streamstate.utils.configured_streams import stream_spec

        planned = ti.xcom_pull(task_ids="plan") if ti is not None else None
        if not planned:
            return {"clones_expired": 0}  # nothing was planned: no clone
        spec = stream_spec((params or {})["stream"])
        store = StreamstateStoreHook(spec.store, storage_conn_id=spec.storage_conn_id).store
        if any(r.clone == planned["clone_name"] for r in list_clones(store, spec.name)):
            return expire_clones(store, source_stream=spec.name, names=[planned["clone_name"]], force=True,
                                 connection=checkpoint_connection(planned["clone_checkpoint"],
                                                                  spec.storage_conn_id)).to_json()
        open_checkpoint(planned["clone_checkpoint"], spec.storage_conn_id).delete_all()  # never recorded
        return {"clones_expired": 0}

    checked = damage(validate.output)
    snapshot >> validate
    checked >> bisect
    recorded = record_clone(found, repair_clone.output)
    found >> repair_clone >> recorded >> validate_clone >> approve >> stop >> repair >> validate_repaired >> resume
    rolled_back = rollback()
    [stop, repair, validate_repaired, resume] >> rolled_back
    repaired(repair.output, resume.output)
    # After the approval, never directly below it: a rejection skips the approval's own
    # downstream tasks, and the clone must go whatever the answer.
    [validate_clone, resume, rolled_back] >> tear_down()
