"""A validation's Data Docs, read for a browser: the Great Expectations HTML a validation wrote
to a directory or an `s3://` prefix, one file at a time.

Only a location a validation record holds is ever read (the record keeps where its run
wrote them: engine/state/validation.py), and only files below the directory of its
`index.html`: a request names a stream, a snapshot, a suite and a relative path, never a
location. A remote location is read through the store's own connection, as the validation
job wrote it.
"""

from __future__ import annotations

import mimetypes
import posixpath
from dataclasses import dataclass

from airflow_provider_streamstate.engine.catalog.validation_records import get_validation
from airflow_provider_streamstate.engine.checkpoint.filesystems import location_scheme, open_checkpoint_fs
from airflow_provider_streamstate.engine.core.errors import NotFoundError, UsageError
from airflow_provider_streamstate.engine.core.manifest import validate_snapshot_id, validate_stream_name
from airflow_provider_streamstate.engine.stores.base import SnapshotStore

MAX_FILE_BYTES = 32 << 20  # a Data Docs page or asset; larger is not GX's


@dataclass(frozen=True)
class DocsFile:
    """One file of a Data Docs site."""

    path: str
    content: bytes
    content_type: str


def data_docs_location(store: SnapshotStore, stream: str, snapshot_id: str, suite: str) -> str | None:
    """Where the suite's validation of the snapshot wrote its Data Docs (their `index.html`), as
    its record says; None when the record names none (NotFoundError without a record)."""
    rec = get_validation(store, validate_stream_name(stream), validate_snapshot_id(snapshot_id), suite)
    if rec is None:
        raise NotFoundError(f"snapshot {snapshot_id} of {stream} has no validation of suite {suite}",
                            hint="the snapshot's page lists its validations")
    docs = rec.selector.get("data_docs") if isinstance(rec.selector, dict) else None
    return docs if isinstance(docs, str) and docs else None


def _relative(path: str) -> str:
    """`path` as a plain relative POSIX path below the site ('' is its index)."""
    rel = path.strip("/") or "index.html"
    if ("\\" in rel or any(ord(c) < 32 for c in rel) or posixpath.normpath(rel) != rel
            or rel.split("/")[0] in ("..", ".") or "/../" in f"/{rel}/"):
        raise UsageError(f"{path!r} is not a path inside the Data Docs", hint="follow the links of the Data Docs")
    return rel


def read_data_docs(store: SnapshotStore, stream: str, snapshot_id: str, suite: str, path: str = "") -> DocsFile:
    """One file (default `index.html`) of the Data Docs the validation recorded."""
    location = data_docs_location(store, stream, snapshot_id, suite)
    if location is None:
        raise NotFoundError(f"the validation of {snapshot_id} by suite {suite} recorded no Data Docs",
                            hint="validate with --data-docs DIR (or data_docs=) to write them")
    rel = _relative(path)
    site = posixpath.dirname(location.rstrip("/")) if location.endswith(".html") else location.rstrip("/")
    connection = store.checkpoint_connection(site) if location_scheme(site) != "file" else None
    fs = open_checkpoint_fs(site, connection=connection)
    st = fs.stat(rel)
    if st is not None and fs.local_path is not None:  # a link must not lead out of the site
        root = fs.local_path.resolve()
        if not (root / rel).resolve().is_relative_to(root):
            st = None
    if st is None or not st.regular or st.size > MAX_FILE_BYTES:
        raise NotFoundError(f"the Data Docs of {snapshot_id} ({suite}) have no file {rel}"
                            + ("" if st is None else f" of at most {MAX_FILE_BYTES >> 20} MiB"),
                            hint=f"they were written to {location}")
    with fs.open_checked(rel, st) as fh:
        content = fh.read()
    kind = mimetypes.guess_type(rel)[0] or "application/octet-stream"
    return DocsFile(rel, content, kind)
