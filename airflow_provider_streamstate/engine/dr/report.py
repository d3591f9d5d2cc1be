"""What a failover cost: RTO (from the decision to fail over to the first batch the DR
stream committed, and to caught up) split into its parts, and RPO in events as far as the
DR side can know it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RPO_UNKNOWN = (
    "events the primary accepted but the mirror never received cannot be counted from the DR side; "
    "when the primary cluster is back, compare its end offsets with the last mirrored records"
)
RPO_FAILBACK = (
    "0: a planned failback stops the DR stream and snapshots its last committed batch; every record after it "
    "is read from the reverse mirror, which must keep running until producers write to the primary again"
)


def _at(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def commit_time(checkpoint: str, batch_id: int) -> datetime | None:
    """When a local checkpoint committed `batch_id` (its commit file's mtime); None elsewhere."""
    location = checkpoint.removeprefix("file://")
    if "://" in location:
        return None
    path = Path(location) / "commits" / str(batch_id)
    return datetime.fromtimestamp(path.stat().st_mtime, UTC) if path.exists() else None


def failover_report(
    run_start: datetime | str, stream: dict[str, Any], fenced: dict[str, Any], restored: dict[str, Any],
    launched: dict[str, Any], caught_up: dict[str, Any], now: datetime | None = None, *, kind: str = "failover",
) -> dict[str, Any]:
    """The failover (or failback) DAG's report from its tasks' results (all seconds from
    `run_start`)."""
    start = _at(run_start)
    assert start is not None
    now = now or datetime.now(UTC)
    first = commit_time(str(stream.get("checkpoint", "")), int(restored["batch_id"]) + 1)
    launched_at = _at(launched.get("started_at"))

    def since(t: datetime | None) -> float | None:
        return round((t - start).total_seconds(), 3) if t is not None else None

    parts = {
        "choose_snapshot_s": restored["seconds_choose"],
        "restore_s": restored["seconds_restore"],
        "rewrite_offsets_s": restored["seconds_rewrite"],
        "verify_standby_s": restored.get("seconds_verify_standby", 0.0),
        "launched_at_s": since(launched_at),
        "spark_start_to_first_batch_s": round((first - launched_at).total_seconds(), 3)
        if first is not None and launched_at is not None else None,
    }
    out = {
        "stream": restored["stream"],
        "snapshot_id": restored["snapshot_id"],
        "resumed_after_batch": restored["batch_id"],
        "primary_fenced": fenced.get("outcome"),
        "rto_first_batch_s": since(first),
        "rto_caught_up_s": since(now),
        "rto_parts": parts,
        "replayed_from_mirror": restored["events_behind"],
        "lag_at_end": caught_up.get("total_lag"),
        "rpo_events": 0 if kind == "failback" else None,
        "rpo_note": RPO_FAILBACK if kind == "failback" else RPO_UNKNOWN,
    }
    left, there = ("DR", "primary") if kind == "failback" else ("primary", "DR")
    out["lines"] = [
        f"{kind} of {out['stream']}: resumed after batch {out['resumed_after_batch']} from {out['snapshot_id']} "
        f"({left}: {out['primary_fenced']})",
        f"RTO: first {there} batch {out['rto_first_batch_s']} s after the trigger, caught up after "
        f"{out['rto_caught_up_s']} s" if first is not None or restored["events_behind"] else
        f"RTO: nothing to catch up (no new batch until new input); running and caught up after "
        f"{out['rto_caught_up_s']} s",
        "RTO parts: " + ", ".join(f"{k} {v}" for k, v in parts.items()),
        f"replayed from the mirror: {out['replayed_from_mirror']} record(s); RPO: {out['rpo_note']}",
    ]
    standby = restored.get("standby")
    if standby:
        out["standby"] = {k: standby.get(k) for k in ("location", "used", "reason", "files", "files_read")}
        out["lines"].append(f"warm standby {standby['location']}: promoted, {standby['files']} files verified, "
                            f"{standby['files_read']} read" if standby["used"] else
                            f"warm standby {standby['location']}: not used ({standby['reason']}); restored over it")
    return out
