"""A stand-in for a YARN ResourceManager's REST API, answering with the documents a real one
(Hadoop 3.4.2) returned, for unit tests of what the engine does with them. The integration
tests use the stack's real YARN cluster."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

APP = "application_1795599858789_0001"


class FakeRM(BaseHTTPRequestHandler):
    """Answers as the ResourceManager did, with one running application."""

    apps: dict[str, dict[str, Any]] = {}
    seen: list[str] = []

    def _send(self, code: int, doc: Any = None) -> None:
        body = b"" if doc is None else json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.seen.append(f"GET {self.path}")
        app_id = self.path.split("?")[0].rsplit("/", 1)[-1]
        if app_id == "application_1_403":
            return self._send(403)
        app = self.apps.get(app_id)
        return self._send(200, {"app": app}) if app else self._send(404, {"RemoteException": {}})

    def do_PUT(self) -> None:  # noqa: N802
        self.seen.append(f"PUT {self.path} {self.rfile.read(int(self.headers['Content-Length'])).decode()}")
        app_id = self.path.split("?")[0].split("/")[-2]
        self.apps[app_id] = {**self.apps[app_id], "state": "KILLED", "finalStatus": "KILLED",
                             "diagnostics": f"Application {app_id} was killed by user root"}
        return self._send(202, {"state": "KILLING"})

    def log_message(self, *args: object) -> None:
        pass


def serve_fake_rm() -> Iterator[str]:
    """A stand-in ResourceManager on loopback with one running application: its base URL."""
    FakeRM.apps = {APP: {"id": APP, "user": "root", "state": "RUNNING", "finalStatus": "UNDEFINED", "diagnostics": "",
                         "amContainerLogs": "http://localhost:33073/node/containerlogs/c_01/root"}}
    FakeRM.seen = []
    server = HTTPServer(("127.0.0.1", 0), FakeRM)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
