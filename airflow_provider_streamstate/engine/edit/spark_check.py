"""Spark's own word on an edit batch, before anything is promoted: a Spark application in
the stream's own Spark (jobs/edit_check_job.py, submitted like the rescale's repartition)
loads the edited copy at batch N+1 with Spark's state reader, every operator and store (so
every partition's new file is loaded by Spark's provider), and reports per store how many
entries Spark reads, and for each changed key it is asked about whether Spark finds it and
its value (as Spark's `to_json` writes it, beside the asked value written the same way).
Keys and values travel as JSON lists in field order (a window aggregation's key repeats a
column name). The keys are found in the read that counts each store (a join); the job is
asked about at most SPARK_KEYS changed keys, spread over the edit (all of a small repair's,
a sample of a large one's, a migration's or a bootstrap's): the engine's own verification
covers every key byte for byte.

The request is written beside the copy (`_streamstate/edit-check-request.json`) and the job
answers beside it (`_streamstate/edit-check.json`). Agreement means: per store, the number
of entries the engine's verification expects (`ExpectedEntries`: the digest's count at the
edit batch; or, when the edit was proved by its changes, Spark counts the batch before too
and the difference must be the edit's), deleted keys absent, set keys holding the asked
value. Spark 3.5 has no state reader: the job says so and the check is refused.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_provider_streamstate.engine.checkpoint.filesystems import CheckpointFS
from airflow_provider_streamstate.engine.checkpoint.filesystems.base import SIDECAR_DIR
from airflow_provider_streamstate.engine.core.errors import StreamstateError, UnsupportedCheckpointError
from airflow_provider_streamstate.engine.edit.changes import KeyChange
from airflow_provider_streamstate.engine.edit.verify import BatchProof
from airflow_provider_streamstate.engine.lookup.digest import StateDigest
from airflow_provider_streamstate.engine.lookup.encodings.values import to_jsonable
from airflow_provider_streamstate.engine.streams.applications import CommandFor, run_job

log = logging.getLogger("streamstate.edit")

REQUEST = f"{SIDECAR_DIR}/edit-check-request.json"
ANSWER = f"{SIDECAR_DIR}/edit-check.json"
SPARK_KEYS = 64  # changed keys Spark is asked about (each a literal row of the job's query)
NO_STATE_READER = 3  # the job's exit code on a Spark without a state reader (3.5)



class EditCheckFailed(StreamstateError):
    """Spark read the edited copy otherwise than the engine did; nothing was put in place."""


@dataclass(frozen=True)
class SparkCheck:
    """What Spark's state reader found in the edited copy."""

    spark_version: str
    entries: dict[str, int]  # "<operator>/<store>" -> rows Spark read
    keys_checked: int

    def to_json(self) -> dict[str, Any]:
        return {"spark_version": self.spark_version, "entries": self.entries, "keys_checked": self.keys_checked}


def edit_check_application() -> str:
    """The path of the application spark-submit runs for the check."""
    return str(Path(__file__).resolve().parents[2] / "jobs" / "edit_check_job.py")


def sample(changes: Sequence[KeyChange], n: int = 0) -> list[KeyChange]:
    """At most `n` (default SPARK_KEYS) of the changes, evenly spread over them."""
    n = n or SPARK_KEYS
    if len(changes) <= n:
        return list(changes)
    step = len(changes) / n
    return [changes[int(i * step)] for i in range(n)]


@dataclass(frozen=True)
class ExpectedEntries:
    """How many entries Spark must read per store (`<operator>/<store>`): `entries` at the
    edit batch, or with `base_batch`, `entries` more than at that batch (fewer: negative)."""

    entries: dict[str, int]
    base_batch: int | None = None

    @classmethod
    def of_digest(cls, digest: StateDigest) -> ExpectedEntries:
        """The digest's counts (a column family's entries counted with its store's)."""
        out: dict[str, int] = {}
        for s in digest.stores:
            label = f"{s.operator_id}/{s.store.split('/')[0]}"
            out[label] = out.get(label, 0) + s.entries
        return cls(out)

    @classmethod
    def of_change(cls, proof: BatchProof) -> ExpectedEntries:
        return cls({s.label: s.entries_change for s in proof.stores}, base_batch=proof.batch_id - 1)


def request(batch_id: int, expected: ExpectedEntries, changes: Sequence[KeyChange]) -> dict[str, Any]:
    """What the job reads: the batch (and the one to count against), each operator's
    stores, and the changed keys to ask about (a sample of them: `sample`)."""
    stores = sorted({(int(op), st) for op, st in (label.split("/", 1) for label in expected.entries)}
                    | {(c.operator_id, c.store) for c in changes})
    changes = sample(changes)
    return {"batch_id": batch_id, "base_batch_id": expected.base_batch,
            "stores": [{"operator_id": op, "store": st} for op, st in stores],
            "keys": [{"operator_id": c.operator_id, "store": c.store, "key": to_jsonable(list(c.key.values())),
                      "value": to_jsonable(list(c.value.values())) if c.value is not None else None}
                     for c in changes]}


def problems(answer: dict[str, Any], expected: ExpectedEntries) -> list[str]:
    """Where Spark's reading of the copy disagrees with the engine's (empty: none)."""
    out = []
    ours = expected.entries
    base = answer.get("base_entries") or {}
    for label, n in sorted(answer.get("entries", {}).items()):
        if expected.base_batch is None:
            if ours.get(label, 0) != n:
                out.append(f"operator/store {label}: Spark reads {n} entries, the engine {ours.get(label, 0)}")
        elif label not in base:
            out.append(f"operator/store {label}: Spark did not count batch {expected.base_batch}")
        elif n - base[label] != ours.get(label, 0):
            out.append(f"operator/store {label}: Spark reads {n} entries, {base[label]} at batch {expected.base_batch} "
                       f"({n - base[label]:+d}), the edit's change is {ours.get(label, 0):+d}")
    for k in answer.get("keys", []):
        where = f"key {json.dumps(k['key'])} of operator {k['operator_id']}"
        if k["expected"] is None and k["found"]:
            out.append(f"{where} should be deleted; Spark reads it")
        elif k["expected"] is not None and not k["found"]:
            out.append(f"{where} should be set; Spark does not find it")
        elif k["expected"] is not None and k["value"] != k["expected"]:
            out.append(f"{where}: Spark reads {k['value']}, the edit asked for {k['expected']}")
    return out


@dataclass(frozen=True)
class EditedCopy:
    """One edited copy for Spark to check: the copy, its edit batch, what the engine's
    verification expects there, and the changes."""

    work: CheckpointFS
    batch_id: int
    expected: ExpectedEntries
    changes: Sequence[KeyChange]


def spark_check(stream: str, work: CheckpointFS, batch_id: int, expected: ExpectedEntries,
                changes: Sequence[KeyChange], command: CommandFor, *, timeout_s: float | None = None,
                on_submit: Callable[[Any], None] | None = None) -> SparkCheck:
    """Run the check job on the copy `work` at `batch_id` and compare; EditCheckFailed (or
    UnsupportedCheckpointError on a Spark without a state reader) when Spark disagrees."""
    return spark_checks(stream, [EditedCopy(work, batch_id, expected, changes)], command, timeout_s=timeout_s,
                        on_submit=on_submit)[0]


def spark_checks(stream: str, copies: Sequence[EditedCopy], command: CommandFor, *, timeout_s: float | None = None,
                 on_submit: Callable[[Any], None] | None = None) -> list[SparkCheck]:
    """`spark_check` of several copies by one Spark application (one start of Spark for
    them all), each compared on its own; the first disagreement raises."""
    for c in copies:
        c.work.write_record(REQUEST, json.dumps(request(c.batch_id, c.expected, c.changes)).encode())
        c.work.delete_record(ANSWER)
    app = run_job(command, [c.work.shared_location for c in copies], logs="edit",
                  job_id=f"{stream}-{uuid.uuid4().hex[:8]}", name=f"streamstate-edit-check-{stream}",
                  what=f"Spark's check of the edit of {stream}", timeout_s=timeout_s, on_submit=on_submit,
                  checkpoints=[c.work for c in copies])
    code = app.proc.returncode if app.proc is not None else None
    out = []
    for c in copies:
        raw = c.work.read_record(ANSWER)
        if raw is None:
            if code == NO_STATE_READER:
                raise UnsupportedCheckpointError(f"the Spark of {stream} has no state reader (Spark 3.5) to check the "
                                                 "edit", hint="edit a stream that runs Spark 4.0 or later")
            raise EditCheckFailed(f"Spark's check of the edit recorded nothing: {app.last_error()}",
                                  hint=f"nothing was changed; its log: {app.log_path}")
        answer = json.loads(raw)
        if answer.get("error"):
            raise EditCheckFailed(f"Spark could not read the edited copy: {answer['error']}",
                                  hint=f"nothing was changed; its log: {app.log_path}")
        found = problems(answer, c.expected)
        if found:
            raise EditCheckFailed(f"Spark reads the edited copy otherwise: {found[0]}"
                                  + (f" (and {len(found) - 1} more)" if len(found) > 1 else ""),
                                  hint="nothing was put in place; report it with the copy's location, "
                                  + c.work.location)
        log.info("Spark %s read the edited copy %s as the engine did (%d keys checked)", answer.get("spark_version"),
                 c.work.location, len(answer.get("keys", [])))
        out.append(SparkCheck(str(answer.get("spark_version")), dict(answer.get("entries", {})),
                              len(answer.get("keys", []))))
    return out
