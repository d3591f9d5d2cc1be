"""Validating a pipeline snapshot as a unit: every member's snapshot with its own Great
Expectations suite (engine/state/validation.py, which records each result write-once beside
the member's snapshot). A pipeline snapshot is known-good only when every member has passed
all its recorded validations: `latest-good` names the newest such pipeline snapshot, the
one a rollback of the whole pipeline should restore.

The members' validations are one batch of state jobs (engine/state/jobs.py): the caller
answers it on a local Spark session, or submits it as one Spark application on its cluster,
as it would a single stream's `validate`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.engine.pipeline.snapshots import PipelineSnapshot
from airflow_provider_streamstate.engine.state.jobs import StateJobRequest
from airflow_provider_streamstate.engine.state.validation import Suite


@dataclass(frozen=True)
class PipelineValidation:
    pipeline: str
    snapshot_id: str
    members: dict[str, dict[str, Any]]  # stream -> {"snapshot_id", "suite", "success", "reused"}

    @property
    def success(self) -> bool:
        return all(m["success"] for m in self.members.values())

    def to_json(self) -> dict[str, Any]:
        return {"pipeline": self.pipeline, "snapshot_id": self.snapshot_id, "success": self.success,
                "members": self.members}


def validate_pipeline(snap: PipelineSnapshot, suites: dict[str, Suite], store_url: str,
                      run_job: Callable[[StateJobRequest], dict[str, Any]], *,
                      record: bool = True) -> PipelineValidation:
    """Run each member's suite on its snapshot in `store_url` (every member needs one: a
    pipeline snapshot is good only when all its members are), each through `run_job`: here
    (`run_state_job` with a reader) or as a Spark application (`submit_state_job`)."""
    unknown, missing = sorted(set(suites) - set(snap.members)), sorted(set(snap.members) - set(suites))
    if unknown or missing:
        raise UsageError(
            f"pipeline {snap.pipeline} has members {', '.join(sorted(snap.members))}; "
            + (f"suites name {', '.join(unknown)}" if unknown else f"no suite for {', '.join(missing)}"),
            hint="give one suite per member: --suite MEMBER=FILE")
    order = snap.spec.order()
    requests = [StateJobRequest(kind="validate", store=store_url, stream=s, snapshot=snap.members[s].snapshot_id,
                                suite=suites[s].definition, record=record) for s in order]
    batch = StateJobRequest(kind="batch", store=store_url, stream=order[0],
                            requests=[{k: v for k, v in asdict(r).items() if k != "job_id"} for r in requests])
    results = run_job(batch)["results"]
    out: dict[str, dict[str, Any]] = {}
    for stream, result in zip(order, results, strict=True):
        out[stream] = {"snapshot_id": snap.members[stream].snapshot_id, "suite": suites[stream].name,
                       "success": bool(result["success"]), "reused": bool(result["reused"])}
    return PipelineValidation(snap.pipeline, snap.snapshot_id, out)
