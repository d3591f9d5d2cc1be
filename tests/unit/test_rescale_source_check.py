"""The in-place rescale's last check before it writes: the checkpoint still ends at the
source snapshot's batch, committed, else one line saying what moved and what to do."""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import SimpleNamespace

import pytest

from airflow_provider_streamstate.engine.checkpoint.filesystems import open_checkpoint_fs
from airflow_provider_streamstate.engine.core.errors import CheckpointChanged
from airflow_provider_streamstate.engine.state.work_copy import check_at_source


def _checkpoint(root: Path, offsets: int, commits: int) -> Path:
    for d, last in (("offsets", offsets), ("commits", commits)):
        (root / d).mkdir(parents=True, exist_ok=True)
        for b in range(last + 1):
            (root / d / str(b)).write_text(f"v1\n{{\"{d}\": {b}}}\n")
    return root


def _source(root: Path, batch: int) -> SimpleNamespace:
    files = [SimpleNamespace(path=f"{d}/{batch}", sha256=hashlib.sha256((root / d / str(batch)).read_bytes()).hexdigest())
             for d in ("offsets", "commits")]
    return SimpleNamespace(batch_id=batch, snapshot_id=f"{batch:012d}-x", files=files)


def test_a_checkpoint_still_at_the_source_batch_passes(tmp_path: Path) -> None:
    root = _checkpoint(tmp_path / "ckpt", 5, 5)
    check_at_source(open_checkpoint_fs(str(root)), _source(root, 5))  # type: ignore[arg-type]


def test_a_stream_stopped_in_the_middle_of_the_next_batch_is_told_to_let_it_commit(tmp_path: Path) -> None:
    root = _checkpoint(tmp_path / "ckpt", 6, 5)
    with pytest.raises(CheckpointChanged) as caught:
        check_at_source(open_checkpoint_fs(str(root)), _source(root, 5))  # type: ignore[arg-type]
    line = caught.value.one_line()
    assert "batch 6 planned but not committed" in line and "rescaling it at batch 5" in line and "--finish-planned-batch" in line
    assert "\n" not in line


def test_a_checkpoint_that_committed_past_the_source_would_be_rewound_and_is_refused(tmp_path: Path) -> None:
    root = _checkpoint(tmp_path / "ckpt", 7, 7)
    with pytest.raises(CheckpointChanged, match="is at batch 7 \\(committed 7\\).*would rewind it"):
        check_at_source(open_checkpoint_fs(str(root)), _source(root, 5))  # type: ignore[arg-type]


def test_a_source_batch_file_rewritten_since_the_snapshot_is_refused(tmp_path: Path) -> None:
    root = _checkpoint(tmp_path / "ckpt", 5, 5)
    source = _source(root, 5)
    (root / "commits" / "5").write_text("v1\n{\"other\": 1}\n")
    with pytest.raises(CheckpointChanged, match="is not the file snapshot"):
        check_at_source(open_checkpoint_fs(str(root)), source)  # type: ignore[arg-type]


def test_an_edit_is_told_the_same_in_its_own_words(tmp_path: Path) -> None:
    root = _checkpoint(tmp_path / "ckpt", 6, 5)
    with pytest.raises(CheckpointChanged, match="editing it at batch 5 would drop"):
        check_at_source(open_checkpoint_fs(str(root)), _source(root, 5), "edit")  # type: ignore[arg-type]
