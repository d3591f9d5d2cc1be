"""Pre-deploy data-quality gate: run the candidate version of a stream's job on a clone of
production state, and block the deploy when its state fails the suite or drifts from
production's.

1. `plan`: the clone's name, checkpoint and sinks (its own: nothing it writes reaches
   production), and the candidate's spec (production's, with the candidate application
   and arguments, which must run to an end, e.g. `--trigger available-now`). Its XCom shows
   the specs with their secrets as `***`: each task derives them from the run's params.
2. `clone`: restore production's snapshot (`latest`, or `latest-good:<suite>`) as the clone.
   `migrate_clone`, when the candidate keeps other state columns than production (one more
   aggregate...): `migrate_to` names a checkpoint the candidate wrote (run it once on a
   little input), and the clone's state is migrated to its schema (new columns from
   `migrate_defaults`, else null; a repeated buffer name's from `migrate_pairs`;
   StateEditOperator's migration, verified), so the
   candidate is tested on production's state instead of being refused by Spark on it.
3. `run_candidate`: spark-submit the candidate on the clone and wait until it stops: it
   processes the same Kafka input production did, up to the current end offsets.
4. `snapshot_clone`, then `validate` (the suite on the clone's state) and `diff` (the
   clone's state against production's snapshot `compare_snapshot`, default `latest`),
   `check_diff` fails when more than `max_changed_keys` keys were added, removed or changed.
5. `tear_down` always runs: stops the clone, deletes its checkpoint and snapshots.
6. `gate` succeeds only when the suite passed and the diff stayed within tolerance: a failed
   `validate` or `check_diff` fails the DAG run (the deploy is blocked), and the failure
   names the expectations that failed and what they observed.

On a cluster: the candidate is submitted like production (the stream spec's Spark
connection, master and deploy mode), and its clone lives beside production's checkpoint
(an `s3a://` checkpoint gives an `s3a://` clone). `state_jobs` runs `validate` and `diff`
as Spark applications too: `{"conn_id": "spark_yarn", "conf": {...}, "jars": [...],
"env": {...}}` (the operators' `SparkJobOptions`; empty: in the task).
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import DAG, Param, task

from airflow_provider_streamstate.operators.snapshot import SnapshotStreamOperator
from airflow_provider_streamstate.operators.state import StateReportOperator
from airflow_provider_streamstate.operators.stream import CloneStreamOperator
from airflow_provider_streamstate.operators.validate import ValidateSnapshotOperator


def planned_(field: str, suffix: str = "") -> str:
    """A template for one field of the `plan` task's XCom (with a text suffix)."""
    return "{{ ti.xcom_pull(task_ids='plan')['" + field + "']" + (f" + '{suffix}'" if suffix else "") + " }}"


def gate_plan(params: dict[str, Any], run_id: str) -> dict[str, Any]:
    """This run's production, candidate and clone specs (to_dict(), secrets included) and the
    clone's name, checkpoint, sinks and reports directory: derived from the run's params by
    each task that needs them, so the specs' secrets are never an XCom (`plan` shows them
    redacted). The clone's sinks get its name as a suffix."""
    import hashlib
    import os

    from airflow_provider_streamstate.spec import StreamSpec
    from airflow_provider_streamstate.utils.configured_streams import mask_secrets

    production = StreamSpec.from_value(params["stream"])
    mask_secrets(production)  # task logs and rendered fields show them as ***
    name = f"{production.name}-gate-{hashlib.sha256(str(run_id).encode()).hexdigest()[:8]}"
    candidate = production.derive(application=params["candidate_application"] or production.application,
                                  application_args=list(params["candidate_args"] or production.application_args))
    sinks = {k: f"{v}-{name}" for k, v in production.sinks.items()}
    root = params["clone_root"] or os.path.join(os.path.dirname(production.checkpoint.rstrip("/")), "gate")
    checkpoint = os.path.join(root, name)
    clone = candidate.derive(name=name, checkpoint=checkpoint, sinks=sinks)
    mask_secrets(candidate)  # its own arguments may hold one too
    return {"production": production.to_dict(), "candidate": candidate.to_dict(), "clone": clone.to_dict(),
            "name": name, "checkpoint": checkpoint, "sinks": sinks,
            "reports": params["reports"] or os.path.join(root, f"{name}-reports")}


def gate_spec_(which: str) -> str:
    """A template for one of this run's specs (`gate_plan`), rendered in the task."""
    return "{{ gate_plan(params, run_id)['" + which + "'] }}"


with DAG(
    dag_id="streamstate_deploy_gate",
    description="Run a candidate job on a clone of production state; block the deploy when its state is bad",
    doc_md=__doc__,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    schedule=None,
    catchup=False,
    render_template_as_native_obj=True,
    user_defined_macros={"gate_plan": gate_plan},
    params={
        "stream": Param({}, type="object", description="the production stream (StreamSpec.to_dict())"),
        "candidate_application": Param("", type="string", description="the candidate's .py file"),
        "candidate_args": Param([], type="array", description="its arguments ({checkpoint}, {sinks[k]}...)"),
        "suite": Param("", type="string", description="a GX suite JSON file for the clone's state"),
        "snapshot": Param("latest", type="string", description="production snapshot to clone"),
        "compare_snapshot": Param("latest", type="string", description="production snapshot to diff against"),
        "max_changed_keys": Param(0, type="integer", minimum=0),
        "clone_root": Param("", type="string", description="directory for the clone's checkpoint"),
        "reports": Param("", type="string", description="directory for the diff report and Data Docs"),
        "run_timeout_s": Param(1800, type="integer", minimum=1),
        "migrate_to": Param("", type="string", description="a checkpoint the candidate wrote: migrate the clone's "
                            "state to its schema first (empty: no migration)"),
        "migrate_operator": Param(0, type="integer", minimum=0, description="the operator whose state is migrated"),
        "migrate_defaults": Param({}, type="object", description="new columns' values for production's keys"),
        "migrate_pairs": Param({}, type="object", description="for a candidate's column whose name repeats "
                               "(sum, sum#2), production's column it continues"),
        "state_jobs": Param({}, type="object", description="where validate and diff run (SparkJobOptions): "
                            "conn_id, deploy_mode, conf, jars, env, timeout (empty: in the task)"),
    },
    tags=["streamstate"],
) as dag:

    @task
    def plan(params: dict | None = None, run_id: str | None = None) -> dict:
        """The clone's name, checkpoint, sinks and reports, and the specs with secrets as ***."""
        from airflow_provider_streamstate.spec import StreamSpec

        assert params is not None
        found = gate_plan(params, str(run_id))
        for which in ("production", "candidate", "clone"):
            found[which] = StreamSpec.from_value(found[which]).redacted().to_dict()
        return found

    planned = plan()
    clone = CloneStreamOperator(
        task_id="clone", stream=gate_spec_("candidate"), clone_name=planned_("name"),
        clone_checkpoint=planned_("checkpoint"), sinks=planned_("sinks"), snapshot="{{ params.snapshot }}",
        start=False, ttl=6 * 3600,
    )

    @task
    def run_candidate(params: dict | None = None, run_id: str | None = None) -> dict:
        """spark-submit the candidate on the clone; wait until it stops by itself."""
        import time

        from airflow.sdk.exceptions import AirflowFailException

        from airflow_provider_streamstate.engine.streams import launcher
        from airflow_provider_streamstate.spec import StreamSpec
        from airflow_provider_streamstate.streams.start import opened_checkpoint, stream_command

        assert params is not None
        spec = StreamSpec.from_value(gate_plan(params, str(run_id))["clone"])
        command, env = stream_command(spec)
        side = opened_checkpoint(spec)
        handle = launcher.launch(command, stream=spec.name, checkpoint=side, env=env,
                                 heartbeat_interval_s=spec.heartbeat_interval_s)
        deadline = time.monotonic() + float(params["run_timeout_s"])
        while True:
            st = launcher.status(side)
            if st.state in ("stopped", "failed", "dead") and (st.state != "stopped" or st.process_alive is not True):
                break
            if time.monotonic() > deadline:
                launcher.stop(handle, timeout_s=30, checkpoint=side)
                raise AirflowFailException(f"the candidate did not finish within {params['run_timeout_s']}s; "
                                           f"give it a bounded trigger (--trigger available-now); log {handle.log}")
            time.sleep(1)
        if st.state != "stopped" or st.exit_code not in (0, None):
            raise AirflowFailException(f"the candidate {st.state} (exit code {st.exit_code}): {st.last_error}; "
                                       f"log {handle.log}")
        return {"state": st.state, "batch_id": st.heartbeat.batch_id if st.heartbeat else None, "log": handle.log}

    @task
    def migrate_clone(params: dict | None = None, run_id: str | None = None) -> dict:
        """With `migrate_to`: the clone's state rewritten into the candidate's schema."""
        from airflow_provider_streamstate.spec import StreamSpec
        from airflow_provider_streamstate.streams.edit import edit_spec, migration
        from airflow_provider_streamstate.utils.task_errors import engine_errors

        assert params is not None
        if not params["migrate_to"]:
            return {"migrated": False}
        clone = StreamSpec.from_value(gate_plan(params, str(run_id))["clone"])
        with engine_errors():
            target = migration(clone, params["migrate_to"], operator=int(params["migrate_operator"]),
                               defaults=dict(params["migrate_defaults"] or {}),
                               pairs=dict(params.get("migrate_pairs") or {}),
                               description=f"the candidate's state schema, from {params['migrate_to']}")
            result = edit_spec(clone, target, apply=True, requested_by="streamstate_deploy_gate")
        print(f"migrated {result.preview.changed} key(s) of {clone.name} to the schema of {params['migrate_to']}")
        return {"migrated": True, **result.to_json()}

    migrated = migrate_clone()
    ran = run_candidate()
    on_cluster = {"spark": "{{ params.state_jobs or None }}"}
    snapshot_clone = SnapshotStreamOperator(task_id="snapshot_clone", stream=gate_spec_("clone"))
    validate = ValidateSnapshotOperator(
        task_id="validate", stream=gate_spec_("clone"), suite="{{ params.suite }}",
        snapshot="{{ ti.xcom_pull(task_ids='snapshot_clone')['snapshot_id'] }}",
        data_docs=planned_("reports", "/docs"), **on_cluster,
    )
    diff = StateReportOperator(
        task_id="diff", stream="{{ params.stream }}", snapshot="{{ params.compare_snapshot }}",
        compare_to="{{ ti.xcom_pull(task_ids='snapshot_clone')['snapshot_id'] }}",
        compare_stream=planned_("name"), report_path=planned_("reports", "/diff.json"), limit=10, **on_cluster,
    )

    @task
    def check_diff(report: dict, params: dict | None = None) -> dict:
        """Fail when the candidate's state differs from production's beyond the tolerance."""
        from airflow.sdk.exceptions import AirflowFailException

        assert params is not None
        changed = report["added"] + report["removed"] + report["changed"]
        if changed > int(params["max_changed_keys"]):
            raise AirflowFailException(
                f"the candidate's state differs from production's on {changed} keys ({report['added']} added, "
                f"{report['removed']} removed, {report['changed']} changed; at most {params['max_changed_keys']} "
                f"allowed); see {report['report']}")
        return report

    @task(trigger_rule="all_done")
    def tear_down(plan: dict, params: dict | None = None, run_id: str | None = None) -> dict:
        """Stop the clone and delete its checkpoint and snapshots, whatever happened."""
        from airflow_provider_streamstate.engine.core.errors import UsageError
        from airflow_provider_streamstate.engine.streams.clones import expire_clones
        from airflow_provider_streamstate.hooks.store import (
            StreamstateStoreHook,
            checkpoint_connection,
            open_checkpoint,
        )
        from airflow_provider_streamstate.spec import StreamSpec

        assert params is not None
        production = StreamSpec.from_value(gate_plan(params, str(run_id))["production"])
        store = StreamstateStoreHook(production.store, storage_conn_id=production.storage_conn_id).store
        try:
            result = expire_clones(store, source_stream=production.name, names=[plan["name"]], force=True,
                                   connection=checkpoint_connection(plan["checkpoint"], production.storage_conn_id)).to_json()
        except UsageError:  # the clone was never recorded (the restore failed): remove what is left
            open_checkpoint(plan["checkpoint"], production.storage_conn_id).delete_all()
            result = {"clones_expired": 0}
        return result

    @task
    def gate(validation: dict, drift: dict, torn_down: dict) -> dict:
        """Reached only when the suite passed and the state stayed within tolerance: deploy."""
        return {"deploy": True, "clone_snapshot": validation["snapshot_id"], "suite": validation["suite"],
                "changed_keys": drift["added"] + drift["removed"] + drift["changed"],
                "data_docs": validation["data_docs"], "clones_expired": torn_down.get("clones_expired")}

    planned >> clone >> migrated >> ran >> snapshot_clone >> [validate, diff]
    checked = check_diff(diff.output)
    torn_down = tear_down(planned)
    [validate, checked] >> torn_down
    gate(validate.output, checked, torn_down)
