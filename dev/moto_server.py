"""moto's S3 server as the stack runs it: `python -m moto.server` with two of its per-request
costs taken away, so the stack's S3 regions spend their CPU on S3.

- moto finds the service of each request by listing its ~175 service packages on disk and
  matching the inferred host against every backend's URL patterns, under one lock, for every
  request; the answer for a host never changes, so it is looked up once per host here;
- werkzeug logs a line per request to the region's log, which nobody reads in a run.

Profiled with py-spy during `tests/integration/test_gc_storm.py` and `test_s3_checkpoint.py`:
the directory listing was 17% of the server's busy samples and the request log 10%
(docs/testing.md). The S3 backend, its request parsing and its responses are moto's own.

    python dev/moto_server.py -H 127.0.0.1 -p 5000
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from typing import Any

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, required=True)
    args = parser.parse_args(argv)
    os.environ.setdefault("MOTO_PORT", str(args.port))  # as moto.server sets it
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: sys.exit(0))
    app = CachedDispatcher(create_backend_app)
    run_simple(args.host, args.port, app, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
