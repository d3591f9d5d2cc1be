"""The Streams pages with something to show, for the browser test and the screenshots: a
stream's real snapshots in a local store, a real `airflow api-server` on a private Airflow
home prepared as the demo prepares its own, and a headless Chromium signed in through
Airflow's own login page.

    seeded = seed_stream(tmp / "streams")          # engine only: no Airflow in this process
    with api_server(tmp / "airflow") as server:    # `airflow api-server` on a free port
        publish(server, seeded)                    # the Variable and a DAG run, through the REST API
        with browser() as driver:
            sign_in(driver, server, VIEWER)        # the login form, as a person does

The stream `orders` is snapshotted at batches 3..15 on timeline 1; the snapshot of batch 15
FAILED its validation, so the stream was rolled back to the known-good 12 (pinned) and went
on, on timeline 2, with 15', 18' and 21'. Every snapshot but the newest was validated; all
but 15 and 21' reached the DR store; a sandbox clone was taken from 18'; a heartbeat says the
query runs. Beside it, `clicks` is stopped. Kafka is not needed: lag shows as not measured.
Nothing here imports Airflow: the server runs in its own process with its own environment
(this process may be a test session with another Airflow home).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from dev import airflow_home  # noqa: E402

DEMO_DAGS = sorted((REPO / "dev" / "demo_dags").glob("*.py"))  # as dev/demo.py prepares its home
STREAM = "orders"
SUITE = "orders_state"
ADMIN, VIEWER = "admin", "oncall"  # the seeding writes through the REST API; a viewer reads the pages
ROLES = {ADMIN: "admin", VIEWER: "viewer"}
SNAPSHOT_DAG = "streamstate_scheduled_snapshot"
START_TIMEOUT_S = 120.0
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@dataclass(frozen=True)
class SeededStream:
    """Where the stream is and the snapshot ids the pages should show ("15" on timeline 1,
    "15'" on timeline 2)."""

    spec: dict[str, str]
    store_url: str
    dr_url: str
    ids: dict[str, str]
    others: list[dict[str, str]]  # specs of the other streams shown beside it

    @property
    def newest(self) -> str:
        return self.ids["21'"]

    @property
    def failed(self) -> str:
        return self.ids["15"]


def _outcomes(*, null_keys: int) -> list[Any]:
    from airflow_provider_streamstate.engine.catalog.validation_records import ExpectationOutcome

    return [
        ExpectationOutcome("expect_column_values_to_not_be_null", {"column": "key"}, null_keys == 0,
                           {"unexpected_count": null_keys}),
        ExpectationOutcome("expect_column_values_to_be_between", {"column": "count", "min_value": 0}, True,
                           {"unexpected_count": 0}),
        ExpectationOutcome("expect_table_row_count_to_be_between", {"min_value": 1}, True, 1200),
    ]


def _validate(store: Any, snapshot_id: str, *, null_keys: int = 0) -> None:
    """A validation record as ValidateSnapshotOperator stores it (the suite's outcomes given,
    not computed: no Spark, no GX run)."""
    from airflow_provider_streamstate.engine.catalog import validation_records as vr
    from airflow_provider_streamstate.engine.core.manifest import SnapshotRef

    try:
        gx = version("great_expectations")
    except PackageNotFoundError:
        gx = "unknown"
    results = _outcomes(null_keys=null_keys)
    vr.put_validation(store, vr.ValidationRecord(
        stream=STREAM, snapshot_id=snapshot_id, batch_id=SnapshotRef.parse(snapshot_id).batch_id, suite=SUITE,
        suite_sha256="5e" * 32, success=all(r.success for r in results),
        validated_at=datetime.now(UTC).isoformat().replace("+00:00", "Z"), gx_version=gx, duration_s=3.2,
        selector={}, results=results))


def seed_stream(root: Path) -> SeededStream:
    """Stream `orders` under `root` (checkpoint, store, DR store): real snapshots of a fake
    checkpoint (tests/unit/fake_checkpoint.py), a rollback, validations, a pin, a clone and
    DR copies, all written through the engine. Its heartbeat names this process, so the
    stream shows `running` while this process lives."""
    from airflow_provider_streamstate.backends.local.store import LocalStore
    from airflow_provider_streamstate.engine.catalog.index import list_summaries
    from airflow_provider_streamstate.engine.catalog.retention import pin_snapshot
    from airflow_provider_streamstate.engine.checkpoint.liveness import Heartbeat, now_iso, write_heartbeat
    from airflow_provider_streamstate.engine.lifecycle.replicate import replicate
    from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
    from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
    from airflow_provider_streamstate.engine.streams.clones import record_clone
    from tests.unit.fake_checkpoint import make_checkpoint
    from tests.unit.test_timelines import grow

    ckpt = make_checkpoint(root / "checkpoints" / STREAM, batches=1)
    store = LocalStore(root / "store", fsync=False)
    dr = LocalStore(root / "dr-store", fsync=False)
    ids: dict[str, str] = {}

    def snap(label: str, batch: int) -> None:
        grow(ckpt, batch)
        ids[label] = create_snapshot(str(ckpt), store, STREAM).manifest.snapshot_id

    for b in (3, 6, 9, 12, 15):
        snap(str(b), b)
    for b in (3, 6, 9, 12):
        _validate(store, ids[str(b)])
    _validate(store, ids["15"], null_keys=42)
    pin_snapshot(store, STREAM, ids["12"], reason="known-good before the bad deploy")
    restore_snapshot(store, STREAM, ids["12"], ckpt, force=True, fsync=False)  # the rollback: timeline 2
    for b in (15, 18, 21):
        snap(f"{b}'", b)
    for label in ("15'", "18'"):
        _validate(store, ids[label])
    replicate(store, dr, STREAM, snapshots=[ids[k] for k in ("3", "6", "9", "12", "15'", "18'")])
    record_clone(store, clone=f"{STREAM}-sandbox", source_stream=STREAM, checkpoint=str(root / "checkpoints" / "sandbox"),
                 snapshot_id=ids["18'"], expires_at="2099-01-01T00:00:00Z", sinks={})
    list_summaries(store, STREAM)  # the catalog index, as `snapshot list` or retention leave it
    write_heartbeat(ckpt, Heartbeat(
        query_id="8a3f0c2e-0d1b-4c55-9e21-3f6d2b7c9a10", run_id="run-2", query_name=STREAM, host=socket.gethostname(),
        pid=os.getpid(), state="running", batch_id=21, input_rows=1200, updated_at=now_iso(),
        interval_s=3600.0))  # fresh for an hour: the page shows `running` while the pid lives
    spec = {"name": STREAM, "checkpoint": str(ckpt), "store": store.url}
    return SeededStream(spec, store.url, dr.url, ids, [_stopped_stream(root, store)])


def _stopped_stream(root: Path, store: Any) -> dict[str, str]:
    """`clicks`, beside it in the same store: two snapshots, never validated, no DR store,
    its query stopped."""
    from airflow_provider_streamstate.engine.checkpoint.liveness import Heartbeat, now_iso, write_heartbeat
    from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
    from tests.unit.fake_checkpoint import make_checkpoint
    from tests.unit.test_timelines import grow

    ckpt = make_checkpoint(root / "checkpoints" / "clicks", batches=1)
    for b in (4, 8):
        grow(ckpt, b)
        create_snapshot(str(ckpt), store, "clicks")
    write_heartbeat(ckpt, Heartbeat(
        query_id="0f4c2b1d-77aa-4e0e-b2a9-6c1d5e3f8b22", run_id="run-1", query_name="clicks", host=socket.gethostname(),
        pid=os.getpid(), state="stopped", batch_id=8, input_rows=0, updated_at=now_iso()))
    return {"name": "clicks", "checkpoint": str(ckpt), "store": store.url}


# --- the API server ---------------------------------------------------------------------------------


@dataclass
class ApiServer:
    """A running `airflow api-server` and the users it lets in."""

    url: str
    home: Path
    log: Path
    process: subprocess.Popen[bytes]
    passwords: dict[str, str] = field(default_factory=dict)

    def token(self, user: str) -> str:
        """A JWT from the server's own /auth/token (SimpleAuthManager's login endpoint)."""
        body = {"username": user, "password": self.passwords[user]}
        return str(self.request("POST", "/auth/token", body)["access_token"])

    def request(self, method: str, path: str, body: Any = None, *, token: str | None = None) -> Any:
        """One JSON request; an HTTP error is raised as urllib's HTTPError."""
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read() or b"null")

    def log_tail(self, lines: int = 80) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def prepared_home(home: Path) -> dict[str, str]:
    """`home` prepared as the demo prepares its own (airflow_home.configure_env, then
    prepare: the DAG folder filled, `airflow db migrate`), and the environment that points
    at it. This process's own environment is put back afterwards: the caller may be a test
    session whose Airflow home must stay its own."""
    saved = dict(os.environ)
    try:
        airflow_home.configure_env(home)
        airflow_home.prepare(home, DEMO_DAGS)  # migrates in a subprocess, with the environment above
        return dict(os.environ)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _airflow(*args: str) -> list[str]:
    return [str(Path(sys.executable).parent / "airflow"), *args]


@contextlib.contextmanager
def api_server(home: Path, *, port: int | None = None) -> Iterator[ApiServer]:
    """`airflow api-server` (the real CLI) on loopback, on `home` prepared as the demo's,
    SimpleAuthManager with an admin and a viewer whose passwords are set here; its DAGs
    parsed into the DB (`airflow dags reserialize`, as the DAG processor would). Stopped,
    its whole process group, whatever happens; its log is `home/api-server.log`."""
    base = prepared_home(home)
    port = port or _free_port()
    passwords = {user: secrets.token_urlsafe(12) for user in ROLES}
    password_file = home / "passwords.json"
    password_file.write_text(json.dumps(passwords))
    password_file.chmod(0o600)
    env = {**base,
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{u}:{r}" for u, r in ROLES.items()),
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(password_file),
           "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(64),
           "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
           "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING"}
    env.pop("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", None)  # a login is what is tested
    log = home / "api-server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(_airflow("api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"),
                                   env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    server = ApiServer(f"http://127.0.0.1:{port}", home, log, process, passwords)
    try:
        parsed = subprocess.run(_airflow("dags", "reserialize"), env=env, capture_output=True, text=True, check=False)
        if parsed.returncode != 0:
            raise RuntimeError(f"airflow dags reserialize failed:\n{parsed.stderr[-3000:]}")
        _wait_until_up(server)
        yield server
    finally:
        _stop(process)


def _wait_until_up(server: ApiServer) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if server.process.poll() is not None:
            raise RuntimeError(f"airflow api-server exited {server.process.returncode}:\n{server.log_tail()}")
        try:
            server.request("GET", "/api/v2/version")
            return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            if time.monotonic() > deadline:
                raise RuntimeError(f"airflow api-server not up after {START_TIMEOUT_S:.0f}s:\n{server.log_tail()}") from None
            time.sleep(0.25)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's process group (uvicorn and its worker), SIGKILL after 15 s."""
    for sig, wait_s in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=wait_s)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError):  # a worker that outlived its parent
        os.killpg(process.pid, signal.SIGKILL)


def publish(server: ApiServer, seeded: SeededStream) -> None:
    """What the pages read from Airflow, written through its REST API as an admin: the
    Variable `streamstate_streams` naming the stream, and a run of the scheduled snapshot DAG
    given the DR store (a DAG run is where the pages learn a stream's DR store). No scheduler
    runs: the run stays queued."""
    token = server.token(ADMIN)
    streams = json.dumps([seeded.spec, *seeded.others])
    server.request("POST", "/api/v2/variables", {"key": "streamstate_streams", "value": streams}, token=token)
    server.request("POST", f"/api/v2/dags/{SNAPSHOT_DAG}/dagRuns",
                   {"logical_date": None, "conf": {"streams": [seeded.spec], "dr_store": seeded.dr_url}}, token=token)


# --- the browser ------------------------------------------------------------------------------------


@contextlib.contextmanager
def browser(*, width: int = 1400, height: int = 900) -> Iterator[Any]:
    """Headless Chromium (Debian's) through Selenium and Debian's chromedriver."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).exists()]
    if missing:
        raise RuntimeError(f"no {' or '.join(missing)}: `make setup` installs Chromium (dev/require.sh browser)")
    options = Options()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={width},{height}",
                "--force-device-scale-factor=1", "--lang=en-US"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        driver.set_page_load_timeout(60)
        yield driver
    finally:
        driver.quit()


def wait_for(driver: Any, css: str, timeout_s: float = 30.0) -> Any:
    """The first element matching `css`, once it is there."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout_s).until(ec.presence_of_element_located((By.CSS_SELECTOR, css)))


def sign_in(driver: Any, server: ApiServer, user: str, *, page: str = "/streamstate/streams") -> str:
    """Open `page` without a session, which sends the browser to Airflow's login page; fill
    in SimpleAuthManager's form and wait until the browser is back on `page`. Returns the URL
    the browser was sent to (the login page's)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(server.url + page)
    wait_for(driver, "input[type=password]")
    login_url = str(driver.current_url)
    driver.find_element(By.CSS_SELECTOR, "input[name=username], input:not([type=password])").send_keys(user)
    password = driver.find_element(By.CSS_SELECTOR, "input[type=password]")
    password.send_keys(server.passwords[user])
    password.submit()
    WebDriverWait(driver, 30).until(lambda d: str(d.current_url).startswith(server.url + page))
    return login_url


def full_page_screenshot(driver: Any, path: Path, *, width: int = 1400, min_height: int = 900) -> None:
    """A PNG of the whole page: the window is made as tall as the document first."""
    height, chrome = driver.execute_script(
        "return [Math.max(document.body.scrollHeight, document.documentElement.scrollHeight),"
        " window.outerHeight - window.innerHeight]")
    driver.set_window_size(width, max(min_height, int(height) + int(chrome)))
    path.parent.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(path))
    driver.set_window_size(width, min_height)
