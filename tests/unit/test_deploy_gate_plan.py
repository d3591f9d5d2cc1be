"""The deploy gate's specs are derived from the run's params in each task that needs them
(dags/streamstate_deploy_gate.py): the `plan` XCom shows them with their secrets as `***`."""

from __future__ import annotations

import json
import runpy
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_streamstate.spec import StreamSpec

GATE = Path(__file__).resolve().parents[2] / "dags" / "streamstate_deploy_gate.py"
SECRET = "s3a-secret-of-production"


@pytest.fixture(scope="module")
def gate() -> dict[str, Any]:
    return runpy.run_path(str(GATE))


def params(tmp_path: Path) -> dict[str, Any]:
    spec = StreamSpec(name="orders", application="/jobs/orders.py", application_args=["--trigger", "processing:1 second"],
                      checkpoint=str(tmp_path / "orders"), store=f"file://{tmp_path / 'store'}",
                      conf={"spark.hadoop.fs.s3a.secret.key": SECRET}, sinks={"alerts": "alerts"})
    return {"stream": spec.to_dict(), "candidate_application": "/jobs/orders-v2.py",
            "candidate_args": ["--trigger", "available-now"], "clone_root": "", "reports": ""}


def test_the_plan_xcom_names_the_clone_and_shows_no_secret(gate: dict[str, Any], tmp_path: Path) -> None:
    plan = gate["dag"].get_task("plan").python_callable(params=params(tmp_path), run_id="manual__1")
    assert SECRET not in json.dumps(plan)
    assert plan["clone"]["conf"] == {"spark.hadoop.fs.s3a.secret.key": "***"}
    assert plan["name"].startswith("orders-gate-") and plan["checkpoint"] == str(tmp_path / "gate" / plan["name"])
    assert plan["sinks"] == {"alerts": f"alerts-{plan['name']}"}
    assert plan["clone"]["application"] == "/jobs/orders-v2.py"


def test_every_task_derives_the_same_specs_with_their_secrets_from_the_run(gate: dict[str, Any],
                                                                           tmp_path: Path) -> None:
    given = params(tmp_path)
    first, again = gate["gate_plan"](given, "manual__1"), gate["gate_plan"](given, "manual__1")
    assert first == again and gate["gate_plan"](given, "manual__2")["name"] != first["name"]
    clone = StreamSpec.from_value(first["clone"])
    assert clone.conf["spark.hadoop.fs.s3a.secret.key"] == SECRET
    assert (clone.name, clone.checkpoint, clone.application_args) == (
        first["name"], first["checkpoint"], ["--trigger", "available-now"])
    assert StreamSpec.from_value(first["production"]).name == "orders"
    # The operators take their specs through this template, rendered in the task.
    assert gate["gate_spec_"]("clone") == "{{ gate_plan(params, run_id)['clone'] }}"
    assert gate["dag"].user_defined_macros["gate_plan"] is gate["gate_plan"]


def test_an_operators_spec_template_renders_to_the_runs_spec_as_a_native_dict(gate: dict[str, Any],
                                                                              tmp_path: Path) -> None:
    """What Airflow renders in the task, with the DAG's macros and native rendering."""
    dag, given = gate["dag"], params(tmp_path)
    template = dag.get_task("clone").stream
    rendered = dag.get_template_env().from_string(template).render(params=given, run_id="manual__1")
    assert isinstance(rendered, dict)
    assert rendered == gate["gate_plan"](given, "manual__1")["candidate"]
    assert rendered["conf"]["spark.hadoop.fs.s3a.secret.key"] == SECRET
