"""Prove an edit batch before anything relies on it, without Spark: the state at N+1 is the
state at N with exactly the asked changes.

A state digest (engine/lookup/digest.py) sums a 128-bit hash of every stored (key, value)
per operator and store, so the digest the edit must produce is computable from the source's
digest and the changed keys alone: minus each changed key's old entry, plus its new one.
The edited copy's digest at N+1, read back with the engine's own decoders, must equal it:
every key the edit did not select is byte-identical to the source (an extra, lost or
altered entry anywhere changes a count or the sum), and every key is in the partition
Spark looks for it in. Then each selected key is read back on its own: gone, or holding
exactly the bytes asked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from airflow_provider_streamstate.engine.checkpoint.filesystems import CheckpointFS
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.core.errors import CorruptionError
from airflow_provider_streamstate.engine.edit.changes import KeyChange
from airflow_provider_streamstate.engine.edit.preview import current_values
from airflow_provider_streamstate.engine.lookup.digest import StateDigest, StoreDigest, state_digest
from airflow_provider_streamstate.engine.lookup.digest_tasks import MASK
from airflow_provider_streamstate.engine.lookup.reading.sources import CheckpointSource, StateSource


def entry_hash(key: bytes, value: bytes) -> int:
    """One stored entry's hash as a digest sums it (digest_tasks._digest_entries)."""
    import xxhash

    return xxhash.xxh3_128_intdigest(len(key).to_bytes(4, "little") + key + value)


def expected_digest(before: StateDigest, changes: Sequence[KeyChange], old: Sequence[bytes | None]) -> StateDigest:
    """The digest of the state after `changes`, from the digest `before` and each changed
    key's value there (`old`, None where absent)."""
    bases = {(s.operator_id, s.store): s for s in before.stores}
    sums = {k: [s.entries, int(s.fingerprint, 16)] for k, s in bases.items()}
    for c, was in zip(changes, old, strict=True):
        where = (c.operator_id, c.store)
        if where not in bases:  # a store without entries anywhere has no digest line yet
            bases[where] = StoreDigest(c.operator_id, c.operator, c.store, 0, f"{0:032x}", before.placement)
            sums[where] = [0, 0]
        acc = sums[where]
        if was is not None:
            acc[0] -= 1
            acc[1] -= entry_hash(c.key_bytes, was)
        if c.value_bytes is not None:
            acc[0] += 1
            acc[1] += entry_hash(c.key_bytes, c.value_bytes)
    out = tuple(replace(bases[k], entries=sums[k][0], fingerprint=f"{sums[k][1] & MASK:032x}") for k in sorted(bases))
    return replace(before, batch_id=before.batch_id + 1, stores=out, misplaced=(), misplaced_keys=0, unreadable=())


def edit_problems(expected: StateDigest, after: StateDigest, src_after: StateSource,
                  changes: Sequence[KeyChange]) -> list[str]:
    """What is wrong with the edited state (`after`, its digest at N+1; `src_after`, the
    copy at N+1): empty when it holds exactly the expected entries, each in its place, and
    each changed key as asked."""
    problems = [f"batch {after.batch_id}: {u}" for u in after.unreadable]
    if after.batch_id != expected.batch_id:
        problems.append(f"the edited digest is of batch {after.batch_id}, not of the edit batch {expected.batch_id}")
    problems += [p.replace(expected.source, "the expected state") for p in after.same_entries(expected)]
    problems += list(after.misplaced)
    if after.misplaced_keys > len(after.misplaced):
        problems.append(f"{after.misplaced_keys - len(after.misplaced)} more keys are not where Spark looks for them")
    for c, now in zip(changes, current_values(src_after, changes), strict=True):
        if now != c.value_bytes:
            want = "absent" if c.value_bytes is None else f"set to {c.value}"
            got = "absent" if now is None else "another value" if c.value_bytes is not None else "still there"
            problems.append(f"key {c.key} of operator {c.operator_id} should be {want} at batch {after.batch_id}, "
                            f"is {got}")
    return problems


def verified_digest(fs: CheckpointFS, batch_id: int, before: StateDigest | None, changes: Sequence[KeyChange],
                    old: Sequence[bytes | None], *, what: str, hint: str, connection: Any = None) -> StateDigest:
    """The digest of the checkpoint `fs` at `batch_id`, once it holds exactly `before` (None:
    no entries at all, a new checkpoint) with `changes`, each key in its place and read back;
    CorruptionError naming the first problem (`what` does not hold ...) otherwise."""
    after = state_digest(fs, batch_id, connection=connection)
    if before is None:
        before = replace(after, batch_id=batch_id - 1,
                         stores=tuple(replace(s, entries=0, fingerprint=f"{0:032x}") for s in after.stores))
    src = CheckpointSource(fs.location, batch_id, reader=CheckpointReader(fs.fresh()))
    problems = edit_problems(expected_digest(before, changes, old), after, src, changes)
    if problems:
        raise CorruptionError(f"{what}: {problems[0]}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1
                                                           else ""), hint=hint)
    return after
