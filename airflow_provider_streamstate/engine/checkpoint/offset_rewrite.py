"""Rewriting where a restored checkpoint resumes in Kafka.

A Spark checkpoint names its Kafka position in two kinds of file: `offsets/<batch>` (one
JSON line per source after the batch metadata; the newest committed batch's is where the
query resumes) and `sources/<i>/0` (a Kafka source's initial offsets). A failover to another
cluster renames the topics and translates the offsets (engine/dr/failover.py); a pipeline
restore moves a downstream query onto the copy of its channel records
(engine/pipeline/restore.py). Both are an `OffsetRewrite`: every Kafka source entry whose
topics it names gets the new names and offsets, in every batch (older batches are history
Spark does not replay; they get the resume offsets so no file names the old position), and
the Hadoop `.crc` sidecars of the rewritten files follow.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from pathlib import Path
from typing import Any

from airflow_provider_streamstate.engine.core.durability import write_atomically
from airflow_provider_streamstate.engine.core.errors import UsageError

HADOOP_CRC_CHUNK = 512


def hadoop_crc(data: bytes) -> bytes:
    """The `.<name>.crc` sidecar Hadoop's local filesystem keeps (CRC32 per 512 bytes)."""
    sums = b"".join(struct.pack(">I", zlib.crc32(data[i:i + HADOOP_CRC_CHUNK]))
                    for i in range(0, len(data), HADOOP_CRC_CHUNK))
    return b"crc\x00" + struct.pack(">i", HADOOP_CRC_CHUNK) + sums


def _rewritten_source(value: Any, names: dict[str, str], offsets: dict[str, dict[str, int]]) -> Any:
    """A source's offsets entry: a Kafka entry all of whose topics are named becomes their
    new names and offsets; anything else stays as it is."""
    if not isinstance(value, dict) or not value or not all(t in names for t in value):
        return value
    return {names[t]: dict(offsets[names[t]]) for t in value}


class OffsetRewrite:
    """The new content of the files that name Kafka offsets. `names`: old topic -> new topic
    (the same name to keep it); `offsets`: new topic -> partition -> the offset to resume at."""

    def __init__(self, names: dict[str, str], offsets: dict[str, dict[str, int]]) -> None:
        missing = sorted(n for n in names.values() if n not in offsets)
        if missing:
            raise ValueError(f"no offsets for {', '.join(missing)}")
        self.names = dict(names)
        self.offsets = {t: dict(p) for t, p in offsets.items()}

    def wants(self, rel: str) -> bool:
        """Whether `rel` (or the file whose checksum sidecar it is) may need rewriting."""
        return _target_of_crc(rel) is not None or _kind(rel) is not None

    def rewrite(self, rel: str, data: bytes, rewritten: dict[str, bytes] | None = None) -> bytes | None:
        """The new content of `rel`, or None when it stays as it is. A `.crc` sidecar is
        rewritten from its file's new content, given in `rewritten`."""
        base = _target_of_crc(rel)
        if base is not None:
            return hadoop_crc(rewritten[base]) if rewritten and base in rewritten else None
        kind = _kind(rel)
        if kind == "offsets":
            lines = data.decode("utf-8").split("\n")
            if lines[0] != "v1" or len(lines) < 2:
                raise UsageError(f"{rel} has an unknown format", hint="use a streamstate-supported Spark")
            out = lines[:2]
            for ln in lines[2:]:
                if ln in ("", "-"):
                    out.append(ln)
                    continue
                out.append(json.dumps(_rewritten_source(json.loads(ln), self.names, self.offsets),
                                      separators=(",", ":")))
            return "\n".join(out).encode() if out != lines else None
        if kind == "sources":
            prefix = b"\x00v1\n" if data.startswith(b"\x00v1\n") else b"v1\n" if data.startswith(b"v1\n") else None
            if prefix is None:
                return None
            try:
                value = json.loads(data[len(prefix):])
            except ValueError:
                return None
            new = _rewritten_source(value, self.names, self.offsets)
            return prefix + json.dumps(new, separators=(",", ":")).encode() if new != value else None
        return None


def _kind(rel: str) -> str | None:
    parts = rel.split("/")
    if len(parts) == 2 and parts[0] == "offsets" and parts[1].isdigit():
        return "offsets"
    if len(parts) == 3 and parts[0] == "sources" and parts[2] == "0":
        return "sources"
    return None


def checksum_sidecar(rel: str) -> str:
    """`offsets/.4.crc` for `offsets/4`: where Hadoop's local filesystem keeps the file's checksums."""
    head, _, name = rel.rpartition("/")
    return f"{head}/.{name}.crc" if head else f".{name}.crc"


def sidecar_of(rel: str) -> str | None:
    """`offsets/4` for Hadoop's checksum sidecar `offsets/.4.crc`; None for any other file."""
    head, _, name = rel.rpartition("/")
    if not (name.startswith(".") and name.endswith(".crc")):
        return None
    return f"{head}/{name[1:-4]}" if head else name[1:-4]


def _target_of_crc(rel: str) -> str | None:
    """`offsets/4` for `offsets/.4.crc` (a file a rewrite changes), else None."""
    base = sidecar_of(rel)
    return base if base is not None and _kind(base) is not None else None


def _write(root: Path, rel: str, data: bytes) -> None:
    """Replace the checkpoint file `rel` and, when it has one, its Hadoop checksum sidecar."""
    write_atomically(root / rel, data)
    sidecar = root / checksum_sidecar(rel)
    if sidecar.exists():
        write_atomically(sidecar, hadoop_crc(data))


def rewrite_local_checkpoint(root: Path, rewrite: Any) -> list[str]:
    """Apply `rewrite` (an OffsetRewrite, or any rewrite of the same shape) to a local
    checkpoint (a restore's staging copy): every file it changes is replaced, with its
    sidecar. The files looked at are those whose content can depend on where the copy
    resumes or lives: the offset log, the sources' initial offsets and operator metadata v2.
    Returns the files rewritten."""
    changed: list[str] = []
    offsets_dir = root / "offsets"
    names = [f"offsets/{n}" for n in sorted((n for n in os.listdir(offsets_dir) if n.isdigit()), key=int)]
    sources = root / "sources"
    names += [f"sources/{src.name}/0" for src in (sorted(sources.iterdir()) if sources.is_dir() else [])
              if (src / "0").is_file()]
    state = root / "state"
    for op in sorted((p for p in state.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)) \
            if state.is_dir() else []:
        v2 = op / "_metadata" / "v2"
        if v2.is_dir():
            names += [f"state/{op.name}/_metadata/v2/{n}" for n in sorted((n for n in os.listdir(v2) if n.isdigit()),
                                                                           key=int)]
    for rel in names:
        new = rewrite.rewrite(rel, (root / rel).read_bytes())
        if new is not None:
            _write(root, rel, new)
            changed.append(rel)
    return changed
