"""Changing a checkpoint in place so that no Spark, ours or anyone's, starts on it half-changed.

A rescale puts a new batch into a stopped stream's checkpoint (its offsets, its commit and
the repartitioned state files); a restore onto a filesystem without an atomic directory
swap (S3, HDFS) replaces every file. Neither is one atomic write, and a plain spark-submit
given the checkpoint's path knows nothing of our records. What every Spark (3.5 to 4.3)
does read first, before anything else of the checkpoint, is `metadata` (the query id, JSON):
a `metadata` that is not JSON fails the query's `start()` with Spark's JSON parser naming
its first word. So a swap *fences* the checkpoint with a `metadata` whose first word is
`FENCE_TOKEN` (`streamstate_swap_unfinished_run_streamstate_stream_recover`: what Spark's
error shows) while it changes the other files, and writes the real one last:

1. `_streamstate/swap.json` is created, create-only (one swap at a time): the files to put
   (moved from a work copy or staging on the same filesystem), the files to remove, the
   `metadata` the checkpoint has before and after, what the swap is.
2. The caller's preconditions hold (no query runs on the checkpoint; it is still at the
   batch the change was made for).
3. The record says `fenced`; `metadata` is replaced by the fence (one atomic write).
4. The preconditions again: a query that started before the fence has written nothing new.
5. Create-only puts first (a new batch's offsets and commit: `exclusive`). One that loses its
   race with a query writing the same batch undoes what this swap placed, lifts the fence
   and refuses: nothing changed. Then the removes, then the other puts.
6. The record says `placed`; the final `metadata` replaces the fence; the record goes.

What a crash leaves, on every filesystem and for every starter: before 3 the old
checkpoint; after 6's `metadata` write the new one; in between a fenced checkpoint that
every Spark refuses to start (and our launcher, snapshots and restores too, naming the way
out). `recover_swap` (`streamstate stream recover`) finishes a fenced swap from its record:
every file still at its source or already in place is put, the removes are done again, the
final `metadata` lifts the fence, and the source (a work copy, a staging) is deleted. A source that lost a file it still had to give (a work
copy deleted by hand) cannot be finished: the checkpoint stays fenced, and restoring a
snapshot into it is the way out.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime

from airflow_provider_streamstate.engine.checkpoint.filesystems import CheckpointFS
from airflow_provider_streamstate.engine.checkpoint.filesystems.base import SIDECAR_DIR, SWAP_FILE
from airflow_provider_streamstate.engine.core.crash_points import crash_point
from airflow_provider_streamstate.engine.core.errors import (
    StreamstateError,
    UnsafeManifestError,
    UnsupportedCheckpointError,
)
from airflow_provider_streamstate.engine.core.manifest import safe_relative_path
from airflow_provider_streamstate.engine.core.records import dump_record, load_record

log = logging.getLogger("streamstate.swap")

SWAP_FORMAT = "streamstate.checkpoint-swap/v1"
# What the last swap did and when: written after its files, so what it wrote is known as
# streamstate's own, not a query's (liveness.unmanaged_writer).
LAST_SWAP_FILE = f"{SIDECAR_DIR}/last-swap.json"
LAST_SWAP_FORMAT = "streamstate.last-swap/v1"
# The first word of a fenced `metadata`: Spark's JSON parser quotes it in the error a
# starter gets (letters, digits and `_` only: it stops at anything else).
FENCE_TOKEN = "streamstate_swap_unfinished_run_streamstate_stream_recover"
METADATA = "metadata"
PHASES = ("prepared", "fenced", "placed")
MAX_SWAP_RECORD = 64 << 20  # a restore of a large checkpoint lists every file


class SwapRefused(StreamstateError):
    """The checkpoint changed under the swap (a query wrote the batch it was to add): nothing
    was changed."""


@dataclass(frozen=True)
class Put:
    """A file the swap puts in place: `rel` of the source, `size` bytes, at `rel` here."""

    rel: str
    size: int
    exclusive: bool = False  # created only if absent: a batch's log file a racing query may write


@dataclass(frozen=True)
class SwapRecord:
    """What a swap changes, and how far it got: the way to finish it after a crash."""

    kind: str  # what changes the checkpoint: rescale, restore, ...
    description: str
    source: str  # the location the puts come from, on the checkpoint's filesystem
    puts: tuple[Put, ...]
    removes: tuple[str, ...]
    metadata: str | None  # the checkpoint's `metadata` once swapped (None: it has none)
    metadata_before: str | None  # its `metadata` before (None: it had none)
    phase: str
    host: str
    pid: int

    def to_json(self) -> bytes:
        d = asdict(self)
        d["puts"] = [[p.rel, p.size, p.exclusive] for p in self.puts]
        d["removes"] = list(self.removes)
        return dump_record(SWAP_FORMAT, d)

    @classmethod
    def from_json(cls, data: bytes) -> SwapRecord:
        """An untrusted record: every path must stay below the checkpoint (ValueError)."""
        d = load_record(data, SWAP_FORMAT, "checkpoint swap record")
        try:
            puts = tuple(Put(safe_relative_path(r), int(n), bool(x)) for r, n, x in d["puts"])
            removes = tuple(safe_relative_path(r) for r in d["removes"])
            record = cls(str(d["kind"]), str(d["description"]), str(d["source"]), puts, removes,
                         None if d.get("metadata") is None else str(d["metadata"]),
                         None if d.get("metadata_before") is None else str(d["metadata_before"]), str(d["phase"]),
                         str(d["host"]), int(d["pid"]))
        except (KeyError, TypeError, ValueError, UnsafeManifestError) as exc:
            raise ValueError(f"not a readable swap record: {exc}") from None
        if record.phase not in PHASES:
            raise ValueError(f"unknown swap phase {record.phase!r}")
        return record


def fence_bytes(location: str, record: SwapRecord) -> bytes:
    """The `metadata` of a fenced checkpoint: the token Spark's error shows, then for people
    who open the file, what is going on and the way out."""
    note = {"swap": record.kind, "what": record.description, "record": SWAP_FILE,
            "way_out": f"streamstate stream recover --checkpoint {location}"}
    return f"{FENCE_TOKEN} {json.dumps(note)}\n".encode()


def is_fenced(metadata: bytes | None) -> bool:
    return metadata is not None and metadata.startswith(FENCE_TOKEN.encode())


def fenced_error(fs: CheckpointFS) -> UnsupportedCheckpointError:
    """The one-line refusal of a fenced checkpoint (or one with an unfinished swap's record)."""
    return UnsupportedCheckpointError(
        f"checkpoint {fs.location} is in the middle of a swap that did not finish (a rescale or a restore "
        "that crashed): Spark will not start on it",
        hint=f"run `streamstate stream recover --checkpoint {fs.shared_location}` to finish it")


def swap_in_progress(fs: CheckpointFS) -> bool:
    """Whether a swap's record is on the checkpoint now (a fence without one, which only a
    hand can leave, is refused by whoever reads `metadata`: Spark, `reader.read_query_id`)."""
    return fs.read_record(SWAP_FILE, limit=0) is not None


def apply_swap(fs: CheckpointFS, source: CheckpointFS, record: SwapRecord, *,
               check: Callable[[], None] = lambda: None) -> None:
    """Change `fs` as `record` says, with the files of `source` (see the module docstring):
    SwapRefused when a create-only put lost its race (nothing changed), `check`'s own error
    when the preconditions fail before the fence went up or right after (nothing changed)."""
    record = replace(record, phase="prepared")
    if not fs.create_record(SWAP_FILE, record.to_json()):
        raise fenced_error(fs)
    try:
        check()
    except BaseException:
        fs.delete_record(SWAP_FILE)
        raise
    crash_point("swap.prepared")
    record = replace(record, phase="fenced")
    fs.write_record(SWAP_FILE, record.to_json())
    crash_point("swap.recorded")
    fs.write_record(METADATA, fence_bytes(fs.shared_location, record), content_type="application/octet-stream")
    fs.sync([METADATA, SWAP_FILE])
    crash_point("swap.fenced")
    try:
        check()
        placed = _place_exclusive(fs, source, record)
    except BaseException:
        _lift(fs, record.metadata_before)
        raise
    crash_point("swap.exclusive-placed")
    _finish(fs, source, record, done=set(placed))


def _place_exclusive(fs: CheckpointFS, source: CheckpointFS, record: SwapRecord) -> list[str]:
    """The create-only puts; on a lost race, the ones placed are taken back and SwapRefused."""
    placed: list[str] = []
    for put in (p for p in record.puts if p.exclusive):
        if not fs.move_from(source, put.rel, exclusive=True):
            fs.delete_files(placed)
            raise SwapRefused(f"{fs.where(put.rel)} was written meanwhile: a query is running on {fs.location}",
                              hint="stop it (every query on that checkpoint), then run it again; nothing was changed")
        placed.append(put.rel)
    return placed


def _finish(fs: CheckpointFS, source: CheckpointFS, record: SwapRecord, *, done: set[str]) -> None:
    """The removes, the other puts, the final metadata, the record gone."""
    fs.delete_files(list(record.removes))
    crash_point("swap.removed")
    rest = [p for p in record.puts if p.rel not in done]
    for i, put in enumerate(rest):
        fs.move_from(source, put.rel)
        if i == len(rest) // 2:
            crash_point("swap.half-placed")
    fs.sync([p.rel for p in record.puts])
    record = replace(record, phase="placed")
    fs.write_record(SWAP_FILE, record.to_json())
    crash_point("swap.placed")
    _write_metadata(fs, record.metadata)
    crash_point("swap.unfenced")
    fs.write_record(LAST_SWAP_FILE, dump_record(LAST_SWAP_FORMAT, {
        "kind": record.kind, "description": record.description, "finished_at": now_iso()}))
    fs.delete_record(SWAP_FILE)
    log.info("%s: %s swapped in (%d files put, %d removed)", fs.location, record.description, len(record.puts),
             len(record.removes))


def _lift(fs: CheckpointFS, metadata: str | None) -> None:
    """Undo a fence that changed nothing else: the old metadata back, the record gone."""
    _write_metadata(fs, metadata)
    fs.delete_record(SWAP_FILE)


def _write_metadata(fs: CheckpointFS, metadata: str | None) -> None:
    if metadata is None:
        fs.delete_files([METADATA])
    else:
        fs.write_record(METADATA, metadata.encode(), content_type="application/octet-stream")
        fs.sync([METADATA])


def recover_swap(fs: CheckpointFS) -> list[str]:
    """Finish (or drop, when it had not begun) a swap a crash left on `fs`; what was done.
    UnsupportedCheckpointError when it cannot be finished (the checkpoint stays fenced)."""
    raw = fs.read_record(SWAP_FILE, limit=MAX_SWAP_RECORD)
    metadata = fs.read_record(METADATA, limit=4096)
    if raw is None:
        if is_fenced(metadata):
            raise UnsupportedCheckpointError(
                f"checkpoint {fs.location} is fenced by a swap whose record is gone: what it was changing is unknown",
                hint="restore a snapshot into it (`streamstate restore ... --force`)")
        return []
    try:
        record = SwapRecord.from_json(raw)
    except ValueError as exc:
        raise UnsupportedCheckpointError(f"{fs.where(SWAP_FILE)} is unreadable ({exc})",
                                         hint="restore a snapshot into the checkpoint (`--force`)") from None
    if not is_fenced(metadata):
        # Not fenced yet (nothing was changed), or the final metadata is written (all was).
        fs.delete_record(SWAP_FILE)
        what = "finished" if record.phase == "placed" else "had not begun"
        return [f"removed the record of a {record.kind} that {what} ({record.description})"]
    source = fs if record.source == fs.location else fs.relocated(_beside(fs, record.source))  # in place: nothing to move
    missing = _unplaceable(fs, source, record)
    if missing:
        raise UnsupportedCheckpointError(
            f"the {record.kind} fenced on {fs.location} cannot be finished: {missing[0]} is neither in place nor at "
            f"{record.source}" + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""),
            hint="restore a snapshot into the checkpoint (`streamstate restore ... --force`)")
    done = {p.rel for p in record.puts if _in_place(fs, p) and (source is fs or not _at_source(source, p))}
    _finish(fs, source, record, done=done)
    if source is not fs:  # the work copy or staging the swap came from: nothing needs it now
        source.delete_all()
    return [f"finished the {record.kind} that a crash interrupted ({record.description})"]


def fence_in_place(fs: CheckpointFS, record: SwapRecord) -> None:
    """Before a restore writes into an empty target itself (no staging to move from): the
    record (its puts are what will be written there) and the fence, so that a crash leaves
    a checkpoint no Spark starts on; `recover_swap` finishes it once every file is there."""
    record = replace(record, source=fs.location, phase="fenced")
    if not fs.create_record(SWAP_FILE, record.to_json()):
        raise fenced_error(fs)
    fs.write_record(METADATA, fence_bytes(fs.shared_location, record), content_type="application/octet-stream")
    fs.sync([METADATA, SWAP_FILE])


def finish_in_place(fs: CheckpointFS, record: SwapRecord) -> None:
    """The in-place restore's files are all written: the final metadata lifts the fence."""
    _finish(fs, fs, replace(record, source=fs.location), done={p.rel for p in record.puts})


def unfence_empty(fs: CheckpointFS) -> None:
    """An in-place restore that failed has removed what it wrote: its fence and record go
    too, leaving the target as empty as it was."""
    _lift(fs, None)


def _beside(fs: CheckpointFS, source: str) -> str:
    """A record's source, once it is what a swap of `fs` moves from: a work copy or staging
    beside the checkpoint, named after it. A record is untrusted, and recovery deletes its
    source: it may name nothing else."""
    parent, _, name = fs.location.rstrip("/").rpartition("/")
    src_parent, _, src_name = source.rstrip("/").rpartition("/")
    pattern = rf"\.?{re.escape(name)}\.streamstate-(?:(?:restore|rescale)-[0-9a-f-]+|edit)"  # edit: engine/edit
    if src_parent != parent or not re.fullmatch(pattern, src_name):
        raise UnsupportedCheckpointError(
            f"{fs.where(SWAP_FILE)} names {source} as its source, which is no work copy of {fs.location}",
            hint="restore a snapshot into the checkpoint (`streamstate restore ... --force`)")
    return source


def _at_source(source: CheckpointFS, put: Put) -> bool:
    st = source.stat(put.rel)
    return st is not None and st.size == put.size


def _in_place(fs: CheckpointFS, put: Put) -> bool:
    st = fs.stat(put.rel)
    return st is not None and st.size == put.size


def _unplaceable(fs: CheckpointFS, source: CheckpointFS, record: SwapRecord) -> list[str]:
    fs.refresh()
    source.refresh()
    return [p.rel for p in record.puts if not _at_source(source, p) and not _in_place(fs, p)]


def now_iso() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def new_record(kind: str, description: str, source: CheckpointFS, puts: Sequence[Put], removes: Sequence[str], *,
               metadata: bytes | None, metadata_before: bytes | None) -> SwapRecord:
    """A swap's record before it begins."""
    return SwapRecord(kind, description, source.location, tuple(puts), tuple(removes),
                      None if metadata is None else metadata.decode(),
                      None if metadata_before is None else metadata_before.decode(), "prepared",
                      socket.gethostname(), os.getpid())
