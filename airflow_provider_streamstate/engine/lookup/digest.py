"""A digest of a checkpoint's whole state at one batch, without Spark: per operator, store
and column family, how many entries it holds and an order-independent fingerprint of them
(the sum of a 128-bit hash of every key and value, as they are stored), and for the
operators whose stored key is the key Spark partitions by, whether each key sits in the
partition `pmod(murmur3(key), partitions)` says.

Two digests are equal exactly when the two states hold the same entries, wherever they are:
how a rescale proves that Spark's offline repartition moved every entry and lost, added or
changed none, and that the moved keys are where Spark will look for them
(`repartition_problems`). Because the fingerprint is a sum, a digest is the sum of its
partitions' digests, computed anywhere (engine/lookup/digest_tasks.py): here in worker
processes (`state_digest`), or as Spark tasks on a cluster's executors (jobs/rescale_job.py),
each reading one store partition at a time, streamed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_streamstate.engine.checkpoint.filesystems import CheckpointFS, open_checkpoint_fs
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.core import errors
from airflow_provider_streamstate.engine.lookup.digest_tasks import (
    MASK,
    MAX_MISPLACED,
    DigestPlan,
    PartitionDigest,
    digest_partition,
    plan_digest,
)
from airflow_provider_streamstate.engine.lookup.digest_workers import run_in_workers
from airflow_provider_streamstate.engine.lookup.reading.reach import Reach

__all__ = ["MAX_MISPLACED", "StateDigest", "StoreDigest", "combine", "repartition_problems", "state_digest"]

log = logging.getLogger("streamstate.digest")
MAX_UNREADABLE = 50  # store partitions a digest names as unreadable (then how many more)
PARALLEL_MIN_BYTES = 16 << 20  # below this much state, worker processes cost more than they save


@dataclass(frozen=True)
class StoreDigest:
    """One store (or column family) of one operator."""

    operator_id: int
    operator: str
    store: str  # the store, or `store/column family`
    entries: int
    fingerprint: str
    placement_checked: bool

    def to_json(self) -> dict[str, Any]:
        return {"operator_id": self.operator_id, "operator": self.operator, "store": self.store,
                "entries": self.entries, "fingerprint": self.fingerprint,
                "placement_checked": self.placement_checked}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> StoreDigest:
        return cls(int(d["operator_id"]), str(d["operator"]), str(d["store"]), int(d["entries"]),
                   str(d["fingerprint"]), bool(d["placement_checked"]))


@dataclass(frozen=True)
class StateDigest:
    """Every store of every stateful operator of a checkpoint at a batch."""

    source: str
    batch_id: int
    partitions: dict[int, int]  # operator id -> partitions
    stores: tuple[StoreDigest, ...]
    misplaced: tuple[str, ...] = field(default=())  # up to MAX_MISPLACED, named
    bytes_read: int = 0
    placement: bool = True  # whether keys' partitions were checked (where the operator allows it)
    placed: int = 0  # keys whose partition was checked
    misplaced_keys: int = 0  # all of them, named or not
    unreadable: tuple[str, ...] = ()  # store partitions that could not be read, and why

    def same_entries(self, other: StateDigest) -> list[str]:
        """What differs between the entries of two digests (empty when they hold the same)."""
        mine = {(s.operator_id, s.store): s for s in self.stores}
        theirs = {(s.operator_id, s.store): s for s in other.stores}
        out = []
        for key in sorted(mine.keys() | theirs.keys()):
            a, b = mine.get(key), theirs.get(key)
            if a is None or b is None:
                out.append(f"operator {key[0]} store {key[1]}: only in {self.source if b is None else other.source}")
            elif (a.entries, a.fingerprint) != (b.entries, b.fingerprint):
                out.append(f"operator {key[0]} store {key[1]}: {a.entries} entries in {self.source}, {b.entries} in "
                           f"{other.source}" + (", and other contents" if a.entries == b.entries else ""))
        return out

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "batch_id": self.batch_id,
                "partitions": {str(k): v for k, v in self.partitions.items()},
                "stores": [s.to_json() for s in self.stores], "misplaced": list(self.misplaced),
                "bytes_read": self.bytes_read, "placement": self.placement, "placed": self.placed,
                "misplaced_keys": self.misplaced_keys, "unreadable": list(self.unreadable)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> StateDigest:
        """A digest as `to_json` wrote it (a job's record)."""
        return cls(str(d["source"]), int(d["batch_id"]), {int(k): int(v) for k, v in d["partitions"].items()},
                   tuple(StoreDigest.from_json(s) for s in d["stores"]), tuple(d.get("misplaced") or ()),
                   int(d.get("bytes_read", 0)), bool(d.get("placement", True)), int(d.get("placed", 0)),
                   int(d.get("misplaced_keys", len(d.get("misplaced") or ()))), tuple(d.get("unreadable") or ()))


def combine(plan: DigestPlan, results: Iterable[PartitionDigest]) -> StateDigest:
    """The digest of a plan's batch from its tasks' results (in any order)."""
    sums: dict[tuple[int, str, str], list[int]] = {}
    checked: set[tuple[int, str]] = set()
    misplaced: list[tuple[tuple[int, str, int], str]] = []
    unreadable: list[str] = []
    placed = misplaced_keys = bytes_read = 0
    for r in results:
        bytes_read += r.bytes_read
        if r.error is not None:
            unreadable.append(f"operator {r.operator_id} store {r.store} partition {r.partition}: {r.error[1]}")
            continue
        for label, entries, total in r.sums:
            acc = sums.setdefault((r.operator_id, r.operator, label), [0, 0])
            acc[0] += entries
            acc[1] = (acc[1] + total) & MASK
        if r.placement_checked:
            checked.add((r.operator_id, r.store))
        placed += r.placed
        misplaced_keys += r.misplaced_keys
        misplaced += [((r.operator_id, r.store, r.partition), m) for m in r.misplaced]
    stores = tuple(StoreDigest(op_id, name, label, a[0], f"{a[1]:032x}", (op_id, label) in checked)
                   for (op_id, name, label), a in sorted(sums.items()))
    named = tuple(m for _, m in sorted(misplaced, key=lambda x: x[0]))[:MAX_MISPLACED]
    unreadable.sort()
    if len(unreadable) > MAX_UNREADABLE:
        unreadable[MAX_UNREADABLE:] = [f"and {len(unreadable) - MAX_UNREADABLE} more store partitions"]
    return StateDigest(plan.source, plan.batch_id, dict(plan.partitions), stores, named, bytes_read, plan.placement,
                       placed, misplaced_keys, tuple(unreadable))


def repartition_problems(before: StateDigest, after: StateDigest, partitions: int) -> list[str]:
    """What is wrong with a repartition to `partitions` partitions, from the digests of the
    batch before it (`before`, placement need not be checked: Spark placed those keys) and
    of the repartition batch (`after`, placement checked): empty when it holds exactly the
    same entries, every key in the partition Spark will look for it in."""
    problems = [f"batch {before.batch_id}: {u}" for u in before.unreadable]
    problems += [f"batch {after.batch_id}: {u}" for u in after.unreadable]
    if after.batch_id != before.batch_id + 1:
        problems.append(f"the digests are of batches {before.batch_id} and {after.batch_id}, not of a batch and the "
                        "repartition batch after it")
    problems += before.same_entries(after)
    counts = sorted(set(after.partitions.values()))
    if counts != [partitions]:
        problems.append(f"the repartitioned state has {counts} partitions, not {partitions}")
    if not after.placement:
        problems.append(f"the partitions of the keys of batch {after.batch_id} were not checked")
    problems += list(after.misplaced)
    if after.misplaced_keys > len(after.misplaced):
        problems.append(f"{after.misplaced_keys - len(after.misplaced)} more keys of batch {after.batch_id} are not "
                        "in the partition Spark looks for them in")
    return problems


# --- running a plan here --------------------------------------------------------------------

def _workers(plan: DigestPlan, workers: int | None) -> int:
    if workers is None:
        size = sum(t.size for t in plan.tasks)
        workers = (os.cpu_count() or 1) if size >= PARALLEL_MIN_BYTES else 1
    return max(1, min(workers, len(plan.tasks)))


def run_plan(plan: DigestPlan, location: str, *, connection: Any = None, workers: int | None = None,
             progress: Callable[[str], None] = lambda msg: None, fs: CheckpointFS | None = None
             ) -> list[PartitionDigest]:
    """Every task of `plan`, in this process (`workers` 1) or in that many worker processes
    (engine/lookup/digest_workers.py; default: one per core once the state is large enough
    to pay for their start), each reaching the checkpoint as `connection` does. `fs`: the
    checkpoint as the caller opened it, for the tasks run here (a worker opens its own)."""
    n = _workers(plan, workers)
    done: list[PartitionDigest] = []

    def report(r: PartitionDigest) -> None:
        done.append(r)
        entries = sum(s[1] for s in r.sums)
        progress(f"operator {r.operator_id} store {r.store} partition {r.partition} of batch {r.batch_id}: "
                 + (f"unreadable ({r.error[1]})" if r.error else f"{entries:,} entries") + f" [{len(done)}/"
                 f"{len(plan.tasks)}]")

    left = list(plan.tasks)
    if n > 1:
        left = run_in_workers(plan.tasks, Reach.of(connection, location), n, report)
        if left:
            log.warning("%d of the digest's %d tasks ran in no worker process: running them here", len(left),
                        len(plan.tasks))
    if left:
        fs = fs or open_checkpoint_fs(location, connection=connection)
        for task in left:
            report(digest_partition(task, fs))
    return done


def raise_unreadable(results: Iterable[PartitionDigest]) -> None:
    """The first unreadable partition's error, raised as the engine error it was."""
    for r in results:
        if r.error is not None:
            kind, message, hint = r.error
            cls = getattr(errors, kind, None)
            if not (isinstance(cls, type) and issubclass(cls, errors.StreamstateError)):
                cls = errors.CorruptionError
            raise cls(message, hint=hint)


def state_digest(checkpoint: str | CheckpointFS, batch_id: int | None = None, *, connection: Any = None,
                 progress: Callable[[str], None] = lambda msg: None, workers: int | None = None,
                 placement: bool = True) -> StateDigest:
    """The digest of the checkpoint (a location, or its filesystem as the caller opened it)
    at committed batch `batch_id` (default the newest), read through `connection` when it is
    remote (else the environment's; worker processes reach it so), in `workers` processes
    (default: see `run_plan`); with `placement`, every key's partition is checked where the
    operator allows it. A partition that cannot be read raises its error
    (engine/core/errors.py)."""
    location = checkpoint.location if isinstance(checkpoint, CheckpointFS) else checkpoint
    fs = checkpoint.fresh() if isinstance(checkpoint, CheckpointFS) else open_checkpoint_fs(
        location, connection=connection)  # opened once: for the plan and the tasks run here
    plan = plan_digest(location, batch_id, placement=placement, reader=CheckpointReader(fs))
    results = run_plan(plan, location, connection=connection, workers=workers, progress=progress, fs=fs)
    digest = combine(plan, results)
    raise_unreadable(results)
    return digest
