"""Storing the files of a cut: what a snapshot reads, hashes, copies and uploads, under the
blob protocol's writer rules (docs/concepts.md, "Blobs, and what may delete them").

A file whose (path, size, mtime) the parent recorded (same checkpoint and query) is not read
again: its entry, blob included, is reused. A new file is read once where that is enough to
store it too: a local store hashes while it writes (`store_file`); a remote checkpoint's
file up to `READ_ONCE_BYTES` is read into memory while it is hashed and stored from that
buffer. Where the store can copy the checkpoint's objects server side (same S3 endpoint and
credentials), a new file is copied in one request to a blob under a unique id and named by
the SHA-256 S3 computes for the copy (`copy_in_unique`): no byte crosses this host and no
request precedes the copy; stores that cannot copy that way are asked first and sent a
content-addressed copy (`copy_in`), named by the object's stored checksum or by its bytes.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

from airflow_provider_streamstate.engine.checkpoint.plans import CutPlan, PlannedFile
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.core.digest import sha256_file, sha256_read, sha256_stream
from airflow_provider_streamstate.engine.core.errors import CheckpointChanged, TransientError
from airflow_provider_streamstate.engine.core.manifest import FileEntry
from airflow_provider_streamstate.engine.core.parallel import run_parallel
from airflow_provider_streamstate.engine.core.progress import Progress
from airflow_provider_streamstate.engine.lifecycle.blob_refresh import RefreshedBlobs
from airflow_provider_streamstate.engine.stores.base import PART_SIZE, SnapshotStore

log = logging.getLogger("streamstate.snapshot")

# A remote checkpoint's file up to this size, going to a store that cannot copy it server
# side, is read once into memory while it is hashed and stored from that buffer (one PUT to
# an S3 store). Memory stays below parallelism x this. Larger files are read twice: once to
# hash them, once streamed into the store (a multipart upload), as buffering them would not
# be bounded by a part.
READ_ONCE_BYTES = PART_SIZE
MAX_COPY_OBJECT_BYTES = 5 * 1024**3  # larger objects need UploadPartCopy; stream them instead


class CutFiles:
    """One snapshot's files: their entries, and the blobs stored for them (counted)."""

    def __init__(
        self, reader: CheckpointReader, store: SnapshotStore, known: dict[str, FileEntry],
        known_blobs: set[str], parallelism: int, progress: Progress, suspect: frozenset[str] | None = None,
        parent_files: list[FileEntry] | None = None,
    ) -> None:
        self.reader = reader
        self.store = store
        self.known = known  # path -> entry, from the parent (same source) and earlier attempts
        self.known_blobs = known_blobs  # blobs a live manifest already references, or we stored
        # Parent blobs to ask the store about: those the census names as lost, or (None) all.
        self.parent_blobs = set(known_blobs) if suspect is None else set(known_blobs) & suspect
        self.parallelism = parallelism
        self.progress = progress
        self.bytes_uploaded = self.blobs_uploaded = self.files_hashed = self.bytes_hashed = 0
        self.blobs_missing = 0
        self.blobs_checked = 0
        self.files_from_checksum = 0  # digests read from S3's stored checksums, no byte read here
        self.blobs_refreshed = 0
        self.vouched = set(known_blobs)  # referenced by the parent manifest this snapshot read
        self.stored: set[str] = set()  # stored (or refreshed) by this snapshot
        self.refreshed = RefreshedBlobs()  # found present and refreshed (rule 4): checked again at the end
        self.lock = threading.Lock()
        self.etags: dict[str, str | None] = {}  # remote checkpoints: path -> file version planned
        probe = reader.fs.object_ref("")
        self.server_side = probe is not None and store.can_copy_in(probe)
        self.blobs_copied_server_side = 0
        self.from_checksum: set[str] = set()  # paths whose digest is the object's stored S3 checksum
        self.read_once = reader.root is None and not self.server_side  # see READ_ONCE_BYTES
        self.storing: set[str] = set()  # blobs a worker is storing from what it read (read_once)
        # New files copied server side to blobs under unique ids, one request each: S3 computes
        # the copy's SHA-256 (docs/concepts.md, "Blob identity").
        self.unique = self.server_side and store.copies_to_unique_blobs
        # sha256 -> a blob holding those bytes: the parent's (checked like every parent blob the
        # cut uses, when the census suspects it) and those it copied itself (dedup by S3's checksum).
        self.by_content = {e.sha256: e.blob_id for e in parent_files or ()}

    def _put(self, e: FileEntry) -> int:
        """Store one checkpoint file as blob `e.blob_id`; FileNotFoundError when it is gone."""
        if self.reader.root is not None:
            return self.store.put_blob(e.sha256, self.reader.root / e.path, e.size)
        fs = self.reader.fs
        etag = self.etags.get(e.path)
        identity = PlannedFile(e.path, e.size, e.mtime_ns, True, etag).identity
        ref = fs.object_ref(e.path, identity) if self.server_side and e.size <= MAX_COPY_OBJECT_BYTES else None
        if ref is not None:
            # The very version that was hashed (or named by a checksum S3 computed: confirmed here).
            written = self.store.copy_in(ref, e.blob_id, e.size, sha256=e.sha256,
                                         confirm=e.path in self.from_checksum or e.blob is not None)
            if written:
                with self.lock:
                    self.blobs_copied_server_side += 1
            return written
        if self.store.has_blob(e.blob_id):
            return 0
        with fs.open_checked(e.path, identity) as src:
            return self.store.put_blob_stream(e.blob_id, src, e.size, sha256=e.sha256)

    def _copy_unique(self, pf: PlannedFile) -> FileEntry | None:
        """Copy a new file of a remote checkpoint server side to a blob under a unique id,
        named by the SHA-256 the store's service computed for the copy; a blob this snapshot
        may rely on that holds the same bytes is used instead (the copy is then an orphan
        garbage collection removes)."""
        ref = self.reader.fs.object_ref(pf.path, pf.identity)
        assert ref is not None
        try:
            blob, digest = self.store.copy_in_unique(ref, pf.size)
        except FileNotFoundError:
            if pf.essential:
                raise CheckpointChanged(f"{pf.path} vanished while it was copied") from None
            return None
        with self.lock:
            self.blobs_copied_server_side += 1
            self.stored.add(blob)
            self.known_blobs.add(blob)
            self.bytes_uploaded += pf.size
            self.blobs_uploaded += 1
            self.files_from_checksum += 1
            self.from_checksum.add(pf.path)
            chosen = self.by_content.setdefault(digest, blob)
        self.progress.advance(pf.size)
        return FileEntry(pf.path, pf.size, digest, pf.mtime_ns, None if chosen == digest else chosen)

    def _vouch(self, digest: str, store_again: Callable[[], int]) -> int:
        """Writer rule 4 (docs/concepts.md): a blob found already present that neither the
        parent manifest nor this snapshot vouches for (another writer's, or a crashed one's
        orphan) is refreshed so GC's grace period starts again; one that vanished meanwhile
        is stored again. Returns the bytes written."""
        with self.lock:
            if digest in self.vouched or digest in self.stored:
                return 0
        for _ in range(3):
            if self.store.refresh_blob(digest):
                with self.lock:
                    self.blobs_refreshed += 1
                self.refreshed.add(digest)
                return 0
            written = store_again()
            if written:
                return written
        raise TransientError(f"blob {digest[:12]} kept vanishing while it was stored", hint="retry the snapshot")

    def _read(self, pf: PlannedFile) -> FileEntry | None:
        """Hash one checkpoint file (storing it too when the store can do both in one read)."""
        if self.reader.root is None:
            return self._read_object(pf)
        path = self.reader.root / pf.path
        written = 0
        try:
            if self.store.hashes_while_storing:
                digest, size, written = self.store.store_file(path)
            else:
                digest, size = sha256_file(path)
            st = os.stat(path)
        except FileNotFoundError:
            if pf.essential:
                raise CheckpointChanged(f"{pf.path} vanished while it was read") from None
            return None  # history Spark cleaned up meanwhile: not needed to resume
        if size != pf.size or st.st_size != pf.size or st.st_mtime_ns != pf.mtime_ns:
            raise CheckpointChanged(f"{pf.path} changed while it was read")
        if self.store.hashes_while_storing:
            if not written:
                written = self._vouch(digest, lambda: self.store.store_file(path)[2])
            with self.lock:
                self.known_blobs.add(digest)
                self.stored.add(digest)
                self.bytes_uploaded += written
                self.blobs_uploaded += 1 if written else 0
        self.progress.advance(size)
        return FileEntry(pf.path, size, digest, pf.mtime_ns)

    def _read_object(self, pf: PlannedFile) -> FileEntry | None:
        """Hash one file of a remote checkpoint; the read fails when the file is no longer
        the version the plan listed. Up to READ_ONCE_BYTES (and no server-side copy) the
        bytes read are kept and stored from memory right here; otherwise it is only hashed,
        and stored later by `_put` (a server-side copy, or a second read streamed)."""
        data: bytearray | None = None
        try:
            if self.unique and pf.size <= MAX_COPY_OBJECT_BYTES:
                return self._copy_unique(pf)
            if self.server_side and pf.size <= MAX_COPY_OBJECT_BYTES:
                entry = self._entry_from_checksum(pf)
                if entry is not None:
                    return entry
            with self.reader.fs.open_checked(pf.path, pf.identity) as f:
                if self.read_once and pf.size <= READ_ONCE_BYTES:
                    digest, data = sha256_read(f, pf.size)
                    size = len(data)
                else:
                    digest, size = sha256_stream(f)
        except FileNotFoundError:
            if pf.essential:
                raise CheckpointChanged(f"{pf.path} vanished while it was read") from None
            return None
        if size != pf.size:
            raise CheckpointChanged(f"{pf.path} changed while it was read")
        if data is not None:
            self._store_read(digest, data)
        self.progress.advance(size)
        return FileEntry(pf.path, size, digest, pf.mtime_ns)

    def _entry_from_checksum(self, pf: PlannedFile) -> FileEntry | None:
        """The entry of a file whose stored checksum names its content (to be copied server
        side and confirmed there); None when it has none: hash it by reading."""
        digest = self.reader.fs.stored_sha256(pf.path, pf.identity)  # FileNotFoundError: see _read_object
        if digest is None:
            with self.lock:
                self.from_checksum.discard(pf.path)  # named by a checksum in an earlier plan
            return None
        with self.lock:
            self.from_checksum.add(pf.path)
            self.files_from_checksum += 1
        self.progress.advance(pf.size)
        return FileEntry(pf.path, pf.size, digest, pf.mtime_ns)

    def _store_read(self, digest: str, data: bytearray) -> None:
        """Store the bytes just read and hashed to `digest` (the very buffer: the blob's name
        is computed from what is written), unless a live manifest already references the
        blob (the parent's are checked in the store before publishing, `upload`) or this
        snapshot stored it. Found present otherwise: writer rule 4, as any upload.

        Files of one content read at once are stored by one of them: the others would find
        the blob present and refresh it, and an S3 snapshot would then wait the store's
        settle time before publishing. Skipping is safe: the one storing it fails the whole
        read phase (and so the snapshot) if it fails."""
        with self.lock:
            if digest in self.known_blobs or digest in self.storing:
                return
            self.storing.add(digest)
        try:
            written = self.store.put_blob_bytes(digest, data)
            if not written:
                written = self._vouch(digest, lambda: self.store.put_blob_bytes(digest, data))
            with self.lock:
                self.known_blobs.add(digest)
                self.stored.add(digest)
                self.bytes_uploaded += written
                self.blobs_uploaded += 1 if written else 0
        finally:
            with self.lock:
                self.storing.discard(digest)

    def entries(self, plan: CutPlan) -> list[FileEntry]:
        """FileEntries for the plan; hashes only files not known by (path, size, mtime)."""
        out: list[FileEntry] = []
        to_hash: list[PlannedFile] = []
        self.etags.update((pf.path, pf.etag) for pf in plan.files)
        for pf in plan.files:
            k = self.known.get(pf.path)
            if k and k.size == pf.size and k.mtime_ns == pf.mtime_ns:
                out.append(k)
            else:
                to_hash.append(pf)
        local_store = self.store.hashes_while_storing and self.reader.root is not None
        phase = "store" if local_store or self.read_once or self.unique else "hash"
        self.progress.start(phase, len(to_hash), sum(p.size for p in to_hash))
        hashed = [e for e in run_parallel(self._read, to_hash, self.parallelism) if e is not None]
        self.progress.finish()
        for e in hashed:
            self.known[e.path] = e
        read = [e for e in hashed if e.path not in self.from_checksum]
        self.files_hashed += len(read)
        self.bytes_hashed += sum(e.size for e in read)
        return sorted(out + hashed, key=lambda e: e.path)

    def check_parent_blobs(self, entries: list[FileEntry]) -> int:
        """Drop from `known_blobs` every suspect blob this cut shares with the parent that
        is no longer in the store (deleted by hand, a partial copy); it is uploaded again."""
        shared = sorted({e.blob_id for e in entries} & self.parent_blobs)
        self.parent_blobs.difference_update(shared)  # checked once per snapshot
        self.blobs_checked += len(shared)
        present = run_parallel(self.store.has_blob, shared, self.parallelism)
        missing = [d for d, ok in zip(shared, present, strict=True) if not ok]
        if missing:
            log.warning(
                "%d blob(s) the parent snapshot references are missing from %s (e.g. %s): uploading them again",
                len(missing), self.store.url, missing[0],
            )
        self.known_blobs.difference_update(missing)
        return len(missing)

    def recheck_refreshed(self, entries: list[FileEntry]) -> None:
        """Right before publishing, store again any blob this snapshot refreshed that a
        concurrent GC deleted since (`blob_refresh`); a vanished file plans the cut again."""
        by_blob = {e.blob_id: e for e in entries}
        for digest in self.refreshed.vanished(self.store, by_blob, self.parallelism):
            e = by_blob[digest]
            log.warning("blob %s vanished after it was refreshed (a concurrent GC): storing it again", digest[:12])
            try:
                self._put(e)
            except FileNotFoundError:
                raise CheckpointChanged(f"{e.path} vanished before it was stored again") from None

    def upload(self, entries: list[FileEntry]) -> None:
        """Store each blob not referenced by a live manifest and not in the store yet."""
        self.blobs_missing += self.check_parent_blobs(entries)
        todo: dict[str, FileEntry] = {}
        for e in entries:
            if e.blob_id not in self.known_blobs:
                todo.setdefault(e.blob_id, e)
        self.progress.start("upload", len(todo), sum(e.size for e in todo.values()))

        def put(e: FileEntry) -> int:
            try:
                written = self._put(e)
                if not written:
                    written = self._vouch(e.blob_id, lambda: self._put(e))
            except FileNotFoundError:
                # Deleted by Spark between hashing and upload: plan the cut again.
                raise CheckpointChanged(f"{e.path} vanished before it was stored") from None
            with self.lock:
                self.stored.add(e.blob_id)
            self.progress.advance(e.size)
            return written

        results = run_parallel(put, list(todo.values()), self.parallelism)
        self.progress.finish()
        self.known_blobs.update(todo)
        self.bytes_uploaded += sum(results)
        self.blobs_uploaded += sum(1 for r in results if r)
