"""Making writes survive a crash: a file's bytes and a directory's entries reach the disk
only when fsynced, and a rename that publishes them must come after both."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def fsync_path(path: Path) -> None:
    """Persist a file's contents, or a directory's entries (its names)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(path: Path, data: bytes, *, fsync: bool) -> None:
    """Write a file's bytes; with `fsync` they are on disk when this returns."""
    with open(path, "wb") as f:
        f.write(data)
        if fsync:
            f.flush()
            os.fsync(f.fileno())


def write_atomically(path: Path, data: bytes, *, fsync: bool = True, tmp: Path | None = None) -> None:
    """Replace `path` with `data` so that a reader sees the old bytes or the new, never a part:
    a temp file (`tmp`, default a hidden `.<name>.*.tmp` beside it) renamed over it. A
    failure removes the temp file and leaves `path` as it was; with `fsync`, the file and its
    directory entry are durable when this returns."""
    if tmp is None:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        tmp = Path(name)
    try:
        write_file(tmp, data, fsync=fsync)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    if fsync:
        fsync_path(path.parent)


def fsync_tree(root: Path) -> None:
    """Persist every directory's entries under `root`, deepest first, then `root` itself."""
    for dirpath, _, _ in sorted(os.walk(root), key=lambda w: w[0].count(os.sep), reverse=True):
        fsync_path(Path(dirpath))
