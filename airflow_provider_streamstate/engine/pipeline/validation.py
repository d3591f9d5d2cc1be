"""Validating a pipeline snapshot as a unit: every member's snapshot with its own Great
Expectations suite (engine/state/validation.py, which records each result write-once beside
the member's snapshot). A pipeline snapshot is known-good only when every member has passed
all its recorded validations: `latest-good` names the newest such pipeline snapshot, the
one a rollback of the whole pipeline should restore.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.engine.pipeline.snapshots import PipelineSnapshot
from airflow_provider_streamstate.engine.state.reader import StateReader
from airflow_provider_streamstate.engine.state.validation import Suite, validate_snapshot


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


def validate_pipeline(reader: StateReader, snap: PipelineSnapshot, suites: dict[str, Suite], *,
                      record: bool = True) -> PipelineValidation:
    """Run each member's suite on its snapshot (every member needs one: a pipeline snapshot
    is good only when all its members are)."""
    unknown, missing = sorted(set(suites) - set(snap.members)), sorted(set(snap.members) - set(suites))
    if unknown or missing:
        raise UsageError(
            f"pipeline {snap.pipeline} has members {', '.join(sorted(snap.members))}; "
            + (f"suites name {', '.join(unknown)}" if unknown else f"no suite for {', '.join(missing)}"),
            hint="give one suite per member: --suite MEMBER=FILE")
    out: dict[str, dict[str, Any]] = {}
    for stream in snap.spec.order():
        m = snap.members[stream]
        result = validate_snapshot(reader, stream, m.snapshot_id, suites[stream], record=record)
        out[stream] = {"snapshot_id": m.snapshot_id, "suite": suites[stream].name, "success": result.success,
                       "reused": result.reused}
    return PipelineValidation(snap.pipeline, snap.snapshot_id, out)
