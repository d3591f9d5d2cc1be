"""The records streamstate keeps beside a checkpoint, wherever the checkpoint lives.

A stream outlives the task that started it, and the tasks that start, watch, stop,
snapshot and restore it may run on different hosts, so liveness (the heartbeat) and
control (launch record, driver record, stop request) live where every one of them can
reach: beside the checkpoint, in `<checkpoint>/_streamstate/` (`SIDECAR_DIR`; Spark ignores
the directory, snapshots leave it out). Each record is replaced atomically and read whole,
through the checkpoint's own filesystem (engine/checkpoint/filesystems/): files of a local
directory, objects beside an S3 prefix, files of an HDFS directory.

Host-local things, the driver's log files and the lock that serialises launches on one
host, stay on the launching host: beside a local checkpoint, or for a remote one in a
directory named after its location below `$STREAMSTATE_HOME` (default `~/.streamstate`).

Connections are passed, not remembered: a caller that reaches the checkpoint with its own
connection (an Airflow connection's S3 client) opens the sidecar from a `CheckpointFS` it
opened with it, and hands that on. A location given as text is opened with the
environment's credentials (a driver's own, an instance role); those sidecars are kept per
location for the process (a driver beats every few seconds), and only those.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from airflow_provider_streamstate.engine.checkpoint.filesystems import (
    MAX_RECORD_BYTES,
    CheckpointFS,
    given_path,
    open_checkpoint_fs,
)
from airflow_provider_streamstate.engine.checkpoint.filesystems.base import SIDECAR_DIR
from airflow_provider_streamstate.engine.checkpoint.swap import fenced_error, swap_in_progress
from airflow_provider_streamstate.engine.core.errors import UnsupportedCheckpointError, UsageError

# The launches of the streams that ran on the checkpoint (engine/streams/records.py): kept by
# a restore that replaces the checkpoint, so launch generations (the drivers' fencing tokens)
# keep counting up across it.
LAUNCHES_DIR = f"{SIDECAR_DIR}/launches"
# A warm standby's record (engine/dr/standby.py): until a failover promotes it, the
# checkpoint is a copy kept up to date in the DR region, never a stream's to run.
STANDBY_FILE = f"{SIDECAR_DIR}/standby.json"


class Sidecar:
    """Small records at paths like `_streamstate/heartbeat.json` beside one checkpoint."""

    def __init__(self, fs: CheckpointFS, location: str | None = None) -> None:
        self.fs = fs
        self.location = location or fs.shared_location
        self.local_dir: Path = fs.host_dir()  # where this host keeps the stream's logs and launch lock

    def __str__(self) -> str:  # messages name the checkpoint
        return self.location

    def read(self, rel: str, *, limit: int = MAX_RECORD_BYTES) -> bytes | None:
        """The record's bytes (at most `limit` + 1 of them), or None when there is none."""
        return self.fs.read_record(rel, limit=limit)

    def write(self, rel: str, data: bytes) -> None:
        """Create or replace the record atomically."""
        self.fs.write_record(rel, data)

    def create(self, rel: str, data: bytes) -> bool:
        """Create the record only if there is none: True when this call created it. Of
        writers racing from any hosts, exactly one wins."""
        return self.fs.create_record(rel, data)

    def names(self, rel_dir: str) -> list[str]:
        """The names of the records directly in `rel_dir` (none when it does not exist)."""
        return self.fs.record_names(rel_dir)

    def delete(self, rel: str) -> None:
        """Remove the record; an absent one is not an error."""
        self.fs.delete_record(rel)

    def where(self, rel: str) -> str:
        """The record's full path or URL, for messages."""
        return self.fs.where(rel)


MAX_CACHED_SIDECARS = 64
_BY_LOCATION: dict[str, Sidecar] = {}  # remote locations opened with the environment's credentials
_GIVEN: dict[str, Sidecar] = {}  # locations this process was told how to reach (`reach_location_as`)
_lock = threading.Lock()


def reach_location_as(location: str, side: Sidecar) -> None:
    """Open `location`, given as text, as `side` from now on in this process: a stream's
    driver reaches its checkpoint as its launcher said (the connection's address and user in
    its Spark conf), where its own environment may not reach it at all."""
    with _lock:
        _GIVEN[location.rstrip("/")] = side


def open_sidecar(checkpoint: str | Path | Sidecar | CheckpointFS) -> Sidecar:
    """The sidecar of a checkpoint: an opened one, one over a `CheckpointFS` the caller
    opened with its connection, or one of a location (a path, a `file:` URI, a remote URL)
    opened with the environment's credentials."""
    if isinstance(checkpoint, Sidecar):
        return checkpoint
    if isinstance(checkpoint, CheckpointFS):
        return Sidecar(checkpoint)
    text = str(checkpoint)
    if (given := _GIVEN.get(text.rstrip("/"))) is not None:
        return given
    try:
        fs = open_checkpoint_fs(text)
    except UnsupportedCheckpointError as exc:
        raise UsageError(f"cannot keep a stream's records beside {text}: {exc.message}",
                         hint=exc.hint or "give the checkpoint as a path, a file:// URI or a supported URL") from None
    if fs.local_path is not None:
        return Sidecar(fs)
    with _lock:
        side = _BY_LOCATION.pop(fs.location, None) or Sidecar(fs)
        _BY_LOCATION[fs.location] = side  # the most recently used last
        while len(_BY_LOCATION) > MAX_CACHED_SIDECARS:
            _BY_LOCATION.pop(next(iter(_BY_LOCATION)))
        return side


def local_root(checkpoint: str | Path, *, refusal: tuple[str, str]) -> Path:
    """A checkpoint given as a path or `file:` URI, as an absolute path (symlinks kept: every
    host names the directory the same way); UsageError(`refusal` message, hint) otherwise."""
    text = str(checkpoint)
    if "://" in text and not text.startswith("file:"):
        raise UsageError(refusal[0], hint=refusal[1])
    try:
        return given_path(text)
    except UnsupportedCheckpointError:
        raise UsageError(refusal[0], hint=refusal[1]) from None


def refuse_unfinished_restore(checkpoint: Sidecar | CheckpointFS) -> None:
    """A checkpoint in the middle of a swap (a restore or a rescale that crashed: fenced,
    engine/checkpoint/swap.py) is never run or read as a checkpoint; `streamstate stream
    recover` finishes it. Nor is a warm standby that no failover promoted."""
    fs = checkpoint.fs if isinstance(checkpoint, Sidecar) else checkpoint
    if swap_in_progress(fs):
        raise fenced_error(fs)
    standby = fs.read_record(STANDBY_FILE)
    if standby is not None and standby_status(standby) != "promoted":
        raise UnsupportedCheckpointError(
            f"checkpoint {fs.location} is a warm standby (its record says {standby_status(standby)}), not a "
            "stream's checkpoint: it is started only once a failover has promoted it",
            hint="fence the primary, then `streamstate failover --standby` it (docs/runbooks/dr-failover.md)",
        )


def standby_status(data: bytes) -> str:
    """The `status` a standby record states (`promoted` once a failover made it a stream's
    checkpoint); `unreadable` for a damaged or hostile record, which is never `promoted`."""
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return "unreadable"
    status = value.get("status") if isinstance(value, dict) else None
    return status if isinstance(status, str) and status.isalpha() and len(status) <= 20 else "unreadable"
