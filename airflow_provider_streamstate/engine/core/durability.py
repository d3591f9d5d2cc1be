"""Making writes survive a crash: a file's bytes and a directory's entries reach the disk
only when fsynced, and a rename that publishes them must come after both."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_path(path: Path) -> None:
    """Persist a file's contents, or a directory's entries (its names)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """Persist every directory's entries under `root`, deepest first, then `root` itself."""
    for dirpath, _, _ in sorted(os.walk(root), key=lambda w: w[0].count(os.sep), reverse=True):
        fsync_path(Path(dirpath))
