"""`late_maintenance_files` accepts between two cuts of one batch exactly what Spark's
state store maintenance writes after a query stopped, and nothing else.

The accepted case is the one observed (PySpark 4.1.3, RocksDB with changelog
checkpointing, minDeltasForSnapshot=3): store state/1/0's snapshot of version 3, queued
at batch 2's commit, was uploaded 1.6 s after the query stopped, between two snapshots
of batch 4; the second cut then started from it instead of changelogs 1-3.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.streams import late_maintenance_files

STORE = "state/1/0"
SST = f"{STORE}/SSTs/000008-7055be44-e19d-4a31-9ff0-e7aaf9e1a992.sst"


FIRST_CUT = "2026-11-22T10:00:00Z"
BEFORE_FIRST_CUT_NS = 1795341600 * 10**9 - 3600 * 10**9  # an hour before it
AFTER_FIRST_CUT_NS = 1795341600 * 10**9 + 2 * 10**9  # the observed upload, 1.6 s after the stop


def _f(path: str, size: int = 10, mtime: int = BEFORE_FIRST_CUT_NS) -> SimpleNamespace:
    return SimpleNamespace(path=path, size=size, mtime_ns=mtime, sha256=f"h-{path}-{size}-{mtime}")


def _cut(*paths: str, batch_id: int = 4, late: tuple[str, ...] = ()) -> SimpleNamespace:
    """A cut whose files were written before FIRST_CUT, except `late` ones (after it)."""
    files = [_f(p, mtime=AFTER_FIRST_CUT_NS if p in late else BEFORE_FIRST_CUT_NS) for p in sorted(paths)]
    return SimpleNamespace(batch_id=batch_id, created_at=FIRST_CUT, files=files)


COMMON = ["metadata", "offsets/3", "offsets/4", "commits/4", "sources/0/0", f"{STORE}/_metadata/schema"]
CHANGELOGS = [p for v in range(1, 6) for p in (f"{STORE}/{v}.changelog", f"{STORE}/{v}.changelog.crc",
                                               f"{STORE}/.{v}.changelog.crc", f"{STORE}/.{v}.changelog.crc.crc")]
ZIP = [f"{STORE}/3.zip", f"{STORE}/3.zip.crc", f"{STORE}/.3.zip.crc", f"{STORE}/.3.zip.crc.crc",
       SST, f"{STORE}/SSTs/.000008-7055be44-e19d-4a31-9ff0-e7aaf9e1a992.sst.crc"]
AFTER_ZIP = [p for p in CHANGELOGS if p.rpartition("/")[2].lstrip(".")[0] in "45"]


def test_nothing_changed_means_no_late_files() -> None:
    cut = _cut(*COMMON, *CHANGELOGS)
    assert late_maintenance_files(cut, _cut(*COMMON, *CHANGELOGS)) == []


def test_a_store_snapshot_uploaded_after_the_first_cut_is_the_only_difference_allowed() -> None:
    late = late_maintenance_files(_cut(*COMMON, *CHANGELOGS), _cut(*COMMON, *ZIP, *AFTER_ZIP, late=tuple(ZIP)))
    assert sorted(f.path for f in late) == sorted(ZIP)  # the 6 files the flaky run hashed


def test_a_store_snapshot_that_was_already_there_at_the_first_cut_is_refused() -> None:
    """A first cut that left out an existing zip is a planner bug, not late maintenance."""
    with pytest.raises(AssertionError, match="the first cut should have held"):
        late_maintenance_files(_cut(*COMMON, *CHANGELOGS), _cut(*COMMON, *ZIP, *AFTER_ZIP))


@pytest.mark.parametrize(
    ("second", "words"),
    [
        ([*COMMON, *CHANGELOGS, "offsets/5"], "not a state store snapshot"),
        ([*COMMON, *CHANGELOGS, f"{STORE}/6.changelog"], "not a state store snapshot"),
        ([*COMMON, *CHANGELOGS, f"{STORE}/6.zip"], "above the cut"),
        ([*COMMON, *CHANGELOGS, SST], "not a state store snapshot"),  # an SST without a new zip
        ([*COMMON, *CHANGELOGS[4:]], "left the cut"),  # changelog 1 vanished, no zip replaces it
    ],
)
def test_anything_else_is_refused(second: list[str], words: str) -> None:
    with pytest.raises(AssertionError, match=words):
        late_maintenance_files(_cut(*COMMON, *CHANGELOGS), _cut(*second, late=tuple(set(second) - {*COMMON, *CHANGELOGS})))


def test_a_file_rewritten_in_place_is_refused() -> None:
    first = _cut(*COMMON, *CHANGELOGS)
    second = _cut(*COMMON, *CHANGELOGS)
    second.files[0] = _f(second.files[0].path, size=11)
    with pytest.raises(AssertionError, match="changed in place"):
        late_maintenance_files(first, second)
