"""moto's S3 server as the stack runs it: `python -m moto.server` with two of its per-request
costs taken away, so the stack's S3 regions spend their CPU on S3.

- moto finds the service of each request by listing its ~175 service packages on disk and
  matching the inferred host against every backend's URL patterns, under one lock, for every
  request; the answer for a host never changes, so it is looked up once per host here;
- werkzeug logs a line per request to the region's log, which nobody reads in a run;
- moto lists a prefix by copying and scanning every key of the bucket, so a listing's cost
  grows with everything the run has written to the bucket (0.6 ms of server CPU per 1,000
  keys: S3A lists a prefix for most of what it does); here each bucket also keeps its key
  names sorted, and a listing reads only the names under its prefix.

Profiled with py-spy during `tests/integration/test_gc_storm.py` and `test_s3_checkpoint.py`:
the directory listing was 17% of the server's busy samples and the request log 10%
(docs/testing.md). The S3 backend, its request parsing and its responses are moto's own.

And one thing moto gets wrong that S3 gets right: a conditional write (`If-None-Match: *`,
`If-Match: <ETag>`) checks the key and then writes it, on the request's thread, with nothing
in between held, so two writers creating one key at once could both be told they created it
(seen once in 40 rounds of tests/integration/test_launch_race.py on a loaded CI machine), and
a plain write could land between another's check and its write. S3 decides the writes of a
key one at a time; here each write of a key (PutObject, CopyObject, DeleteObject, a POST such
as CompleteMultipartUpload; not an upload's parts) holds that key's lock. What moto checks is
unchanged: `If-None-Match: *` and `If-Match` on PutObject, `If-None-Match: *` on
CompleteMultipartUpload, `If-Match` on DeleteObject; no destination condition on a copy (the
engine sends none).

    python dev/moto_server.py -H 127.0.0.1 -p 5000
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from bisect import bisect_left, insort
from collections.abc import Iterator
from typing import Any

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from moto.s3 import models as s3_models
from moto.s3 import responses as s3_responses
from moto.s3.utils import _VersionedKeyStore
from werkzeug.serving import run_simple


class CachedDispatcher(DomainDispatcherApplication):
    """moto's dispatcher, remembering the backend each request host resolves to."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._backends: dict[str | None, Any] = {}

    def get_backend_for_host(self, host: str | None) -> Any:
        try:
            return self._backends[host]
        except KeyError:
            backend = self._backends[host] = super().get_backend_for_host(host)
            return backend


class IndexedKeyStore(_VersionedKeyStore):
    """moto's key store of a bucket (a dict of name -> versions), with the names also kept
    sorted, so that the names under a prefix are one contiguous slice of them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lock = threading.Lock()  # the server answers requests on threads
        self._names: list[str] = sorted(dict.keys(self))

    def _name_added(self, key: str) -> None:
        if not dict.__contains__(self, key):
            insort(self._names, key)

    def _name_removed(self, key: str) -> None:
        at = bisect_left(self._names, key)
        if at < len(self._names) and self._names[at] == key:
            del self._names[at]

    def __setitem__(self, key: str, value: Any) -> Any:
        with self._lock:
            self._name_added(key)
            super().__setitem__(key, value)

    def setlist(self, key: Any, list_: Any) -> Any:
        with self._lock:
            self._name_added(key)
            super().setlist(key, list_)

    def pop(self, key: str) -> None:  # type: ignore[override]
        with self._lock:
            super().pop(key)
            self._name_removed(key)

    def __delitem__(self, key: str) -> None:
        with self._lock:
            super().__delitem__(key)
            self._name_removed(key)

    def under(self, prefix: str) -> Iterator[tuple[str, Any]]:
        """(name, newest version) of every key whose name starts with `prefix`, by name."""
        with self._lock:
            found = []
            for at in range(bisect_left(self._names, prefix), len(self._names)):
                name = self._names[at]
                if not name.startswith(prefix):
                    break
                found.append((name, dict.__getitem__(self, name)))
        return ((name, versions[-1]) for name, versions in found if versions)


_moto_list_objects = s3_models.S3Backend.list_objects


def list_objects(self: Any, bucket: Any, prefix: str | None, delimiter: str | None, marker: str | None,
                 max_keys: int | None) -> tuple[list[Any], list[str], bool, str | None]:
    """moto's S3Backend.list_objects (the same answer: keys under the prefix, folders up to the
    delimiter, delete markers left out, by name, after `marker`, at most `max_keys`) from the
    bucket's sorted names instead of all its keys."""
    if not isinstance(bucket.keys, IndexedKeyStore) or isinstance(bucket, s3_models.FakeTableStorageBucket):
        return _moto_list_objects(self, bucket, prefix, delimiter, marker, max_keys)  # type: ignore[no-any-return]
    prefix = prefix or ""
    keys: list[Any] = []
    folders: set[str] = set()
    for name, key in bucket.keys.under(prefix):
        rest = name[len(prefix):]
        if delimiter and delimiter in rest:
            folders.add(f"{prefix}{rest.split(delimiter)[0]}{delimiter}")
        elif not isinstance(key, s3_models.FakeDeleteMarker):
            keys.append(key)  # by name: `under` reads the sorted names
    if marker:
        keys = self._get_results_from_token(keys, self._pagination_tokens.get(marker) or marker)
    truncated, next_marker = False, None
    if max_keys is not None:
        keys, truncated, next_marker = self._truncate_result(keys, max_keys)
    return keys, sorted(folders), truncated, next_marker


def index_bucket_keys() -> None:
    """New buckets keep their key names sorted, and listings use them."""
    s3_models._VersionedKeyStore = IndexedKeyStore  # type: ignore[misc]  # FakeBucket() looks it up here
    s3_models.S3Backend.list_objects = list_objects  # type: ignore[method-assign]


_key_writes = [threading.Lock() for _ in range(64)]  # by key: the writes of one key share one
_moto_key_response_put = s3_responses.S3Response._key_response_put  # noqa: SLF001
_moto_key_response_delete = s3_responses.S3Response._key_response_delete  # noqa: SLF001
_moto_key_response_post = s3_responses.S3Response._key_response_post  # noqa: SLF001


def _key_lock(bucket: str, key: str) -> threading.Lock:
    return _key_writes[hash((bucket, key)) % len(_key_writes)]


def key_response_put(self: Any, query: dict[str, Any], key_name: str) -> Any:
    """moto's PUT on a key (PutObject, CopyObject, its ACL, tags...), one write of the key at
    a time; an upload's parts, which no reader sees, side by side."""
    if query.get("uploadId") and query.get("partNumber"):
        return _moto_key_response_put(self, query, key_name)
    with _key_lock(self.bucket_name, key_name):
        return _moto_key_response_put(self, query, key_name)


def key_response_delete(self: Any, bucket_name: str, query: dict[str, Any], key_name: str) -> Any:
    """moto's DELETE of a key, one write of the key at a time."""
    with _key_lock(bucket_name, key_name):
        return _moto_key_response_delete(self, bucket_name, query, key_name)


def key_response_post(self: Any, request: Any, body: bytes, bucket_name: str, query: dict[str, Any],
                      key_name: str) -> Any:
    """moto's POST on a key (CompleteMultipartUpload among them), one write of the key at a time."""
    with _key_lock(bucket_name, key_name):
        return _moto_key_response_post(self, request, body, bucket_name, query, key_name)


def decide_writes_of_a_key_one_at_a_time() -> None:
    """A key's writes (a conditional one's check with its write) never interleave, as on S3."""
    s3_responses.S3Response._key_response_put = key_response_put  # type: ignore[method-assign]  # noqa: SLF001
    s3_responses.S3Response._key_response_delete = key_response_delete  # type: ignore[method-assign]  # noqa: SLF001
    s3_responses.S3Response._key_response_post = key_response_post  # type: ignore[method-assign]  # noqa: SLF001


def app() -> CachedDispatcher:
    """The S3 server's WSGI application, with the changes above made to moto."""
    index_bucket_keys()
    decide_writes_of_a_key_one_at_a_time()
    return CachedDispatcher(create_backend_app)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, required=True)
    args = parser.parse_args(argv)
    os.environ.setdefault("MOTO_PORT", str(args.port))  # as moto.server sets it
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: sys.exit(0))
    run_simple(args.host, args.port, app(), threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
