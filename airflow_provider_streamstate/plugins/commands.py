"""The CLI commands and operator calls that restore or clone a snapshot, as its page shows
them for copying: the exact store, stream and snapshot id, quoted for a POSIX shell."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RecoveryCalls:
    restore_cli: str
    clone_cli: str
    restore_operator: str
    clone_operator: str

    def to_json(self) -> dict[str, Any]:
        return {"restore_cli": self.restore_cli, "clone_cli": self.clone_cli,
                "restore_operator": self.restore_operator, "clone_operator": self.clone_operator}


def recovery_calls(*, stream: str, snapshot_id: str, store: str, storage_conn_id: str | None,
                   checkpoint: str | None, configured_store: str | None) -> RecoveryCalls:
    """Restore: rewind the stream's own checkpoint (stop it first; a new timeline starts).
    Clone: a new stream from the snapshot, its own checkpoint and query id."""
    q = shlex.quote
    conn = f" --storage-conn-id {q(storage_conn_id)}" if storage_conn_id else ""
    target = checkpoint or "/path/to/checkpoint"
    clone_name = f"{stream}-clone"
    clone_target = f"{target.rstrip('/')}-clone"
    base = f"streamstate restore --store {q(store)}{conn} --stream {q(stream)}"
    spec = "spec" if store == configured_store else f"spec.derive(store={store!r})"
    return RecoveryCalls(
        restore_cli=f"{base} --target {q(target)} --force {q(snapshot_id)}",
        clone_cli=f"{base} --target {q(clone_target)} --new-query-id {q(snapshot_id)}",
        restore_operator=(
            "from airflow_provider_streamstate.operators.snapshot import RestoreSnapshotOperator\n\n"
            f"# spec: the StreamSpec of {stream} (stop the stream first)\n"
            f"RestoreSnapshotOperator(task_id=\"restore\", stream={spec}, snapshot={snapshot_id!r}, force=True)"
        ),
        clone_operator=(
            "from datetime import timedelta\n\n"
            "from airflow_provider_streamstate.operators.stream import CloneStreamOperator\n\n"
            f"# spec: the StreamSpec of {stream}\n"
            f"CloneStreamOperator(task_id=\"clone\", stream={spec}, snapshot={snapshot_id!r},\n"
            f"                    clone_name={clone_name!r}, clone_checkpoint={clone_target!r}, ttl=timedelta(days=1))"
        ),
    )
