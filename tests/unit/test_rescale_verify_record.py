"""A rescale trusts the digests its repartition job computed on the executors only after
comparing them again itself, and computes them itself only when the job could not: the
decisions of `rescale._verify` on the job's record (the checkpoint's repartition batch and
the digests are stand-ins: their own tests are test_checkpoint_repartition.py and
test_state_digest_parts.py)."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_streamstate.engine.checkpoint.repartition import (
    Repartition,
    RepartitionRecord,
    Verification,
)
from airflow_provider_streamstate.engine.core.errors import CorruptionError
from airflow_provider_streamstate.engine.lookup.digest import StateDigest, StoreDigest
from airflow_provider_streamstate.engine.state import rescale


class _Work:
    location = "/ckpt.streamstate-rescale-6"

    def relocated(self, location: str) -> _Work:
        return self


def digest(batch: int, partitions: int, *, entries: int = 40, fingerprint: str = "f0",
           misplaced: tuple[str, ...] = ()) -> StateDigest:
    store = StoreDigest(0, "stateStoreSave", "default", entries, fingerprint, placement_checked=batch == 8)
    return StateDigest(f"batch {batch}", batch, {0: partitions}, (store,), misplaced=misplaced,
                       placement=batch == 8, placed=entries if batch == 8 else 0, misplaced_keys=len(misplaced))


def record(before: StateDigest | None, after: StateDigest | None, problems: tuple[str, ...] = ()) -> RepartitionRecord:
    v = Verification(problems, None if before is None else before.to_json(), None if after is None else after.to_json(),
                     tasks=10, executors=2, seconds={"digests": 1.5})
    return RepartitionRecord(True, "4.3.0", 6, 8, 2.0, verification=v)


@pytest.fixture
def here(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bool]]:
    """The digests computed on this host, by batch and placement (none unless the job's are
    missing); the copy holds a committed repartition 4 -> 6 at batch 8."""
    monkeypatch.setattr(rescale, "CheckpointReader", lambda fs: fs)
    monkeypatch.setattr(rescale, "repartition_at", lambda reader, b: Repartition(b, 4, 6, committed=True))
    calls: list[tuple[int, bool]] = []

    def local(checkpoint: Any, batch: int, *, connection: Any = None, placement: bool = True) -> StateDigest:
        calls.append((batch, placement))
        return digest(batch, 4 if batch == 7 else 6)

    monkeypatch.setattr(rescale, "state_digest", local)
    return calls


def test_the_jobs_digests_that_agree_are_used_and_nothing_is_read_here(here: list[tuple[int, bool]]) -> None:
    batch, new = rescale._verify(_Work(), 7, 4, 6, record(digest(7, 4), digest(8, 6)), None)  # type: ignore[arg-type]
    assert (batch, new.batch_id, new.partitions) == (8, 8, {0: 6}) and here == []


@pytest.mark.parametrize(
    ("after", "said"),
    [
        (digest(8, 6, entries=39), "operator 0 store default: 40 entries in batch 7, 39 in batch 8"),
        (digest(8, 6, fingerprint="f1"), "and other contents"),
        (digest(8, 5), "has [5] partitions, not 6"),
        (digest(8, 6, misplaced=("key {'k': 1} in partition 2, not 4",)), "in partition 2, not 4"),
    ],
)
def test_the_jobs_digests_are_compared_again_here_whatever_the_job_said(
    here: list[tuple[int, bool]], after: StateDigest, said: str
) -> None:
    """The record says no problem (an older or a damaged job): the comparison here finds them."""
    with pytest.raises(CorruptionError, match="does not hold the snapshot's state") as exc:
        rescale._verify(_Work(), 7, 4, 6, record(digest(7, 4), after), None)  # type: ignore[arg-type]
    assert said in str(exc.value) and here == []


def test_digests_of_another_batch_than_the_snapshots_are_refused(here: list[tuple[int, bool]]) -> None:
    with pytest.raises(CorruptionError, match="not of the snapshot's batch 7"):
        rescale._verify(_Work(), 7, 4, 6, record(digest(6, 4), digest(7, 6)), None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "job",
    [
        None,  # no record: the job could not write it
        RepartitionRecord(True, "4.3.0", 6, 8),  # a job that records no verification
        record(None, None, ("the verification could not run: ModuleNotFoundError: No module named 'lz4'",)),
        RepartitionRecord(True, "4.3.0", 6, 8, verification=Verification((), {"source": "x"}, {}, 1, 1)),
    ],
    ids=["no-record", "no-verification", "could-not-run", "unreadable-digests"],
)
def test_without_the_jobs_digests_the_copy_is_verified_here(
    here: list[tuple[int, bool]], job: RepartitionRecord | None
) -> None:
    batch, new = rescale._verify(_Work(), 7, 4, 6, job, None)  # type: ignore[arg-type]
    assert batch == 8 and here == [(7, False), (8, True)]  # placement checked where it matters: batch N+1


def test_a_copy_without_the_committed_repartition_is_refused_before_any_digest(
    here: list[tuple[int, bool]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rescale, "repartition_at", lambda reader, b: Repartition(b, 4, 6, committed=False))
    with pytest.raises(rescale.RescaleError, match="holds no committed repartition to 6 partitions after batch 7"):
        rescale._verify(_Work(), 7, 4, 6, record(digest(7, 4), digest(8, 6)), None)  # type: ignore[arg-type]
    assert here == []
