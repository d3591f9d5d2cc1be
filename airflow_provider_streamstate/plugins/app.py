"""The FastAPI app behind the Streams pages, mounted by Airflow's API server at /streamstate.

Only users Airflow lets in get an answer: every route depends on Airflow's own `get_user`
(the JWT of an `Authorization: Bearer` header, else the `_token` cookie the UI's login sets)
and on the auth manager allowing the user to read DAG runs. Without a valid session an API
route answers 401/403 and a page redirects to Airflow's login. Every route is a GET and
nothing writes: the stores are read through the engine (engine/overview), and a store can
only be one the configuration knows (sources.py).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from airflow_provider_streamstate.engine.core.errors import (
    NotFoundError,
    StreamstateError,
    UnsupportedCheckpointError,
    UsageError,
)
from airflow_provider_streamstate.engine.core.manifest import validate_snapshot_id, validate_stream_name
from airflow_provider_streamstate.plugins import key_pages, pages
from airflow_provider_streamstate.plugins.commands import recovery_calls
from airflow_provider_streamstate.plugins.key_pages import KeyQuery
from airflow_provider_streamstate.plugins.sources import Configuration, ConfiguredStream

log = logging.getLogger("streamstate.ui")

URL_PREFIX = "/streamstate"
DIFF_TIMEOUT_S = 900.0
_DIFF_RUNNING = threading.Semaphore(1)  # a diff is a Spark job: one at a time per API server

ICON = ("<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 24 24' fill='none' stroke='currentColor' "
        "stroke-width='2'><circle cx='5' cy='12' r='2'/><circle cx='12' cy='6' r='2'/><circle cx='19' cy='12' r='2'/>"
        "<circle cx='12' cy='18' r='2'/><path d='M7 12h10M12 8v8'/></svg>")


def _airflow_root() -> str:
    from urllib.parse import urlsplit

    from airflow.configuration import conf

    return urlsplit(conf.get("api", "base_url", fallback="") or "/").path.rstrip("/")


async def reader(request: Request) -> Any:
    """The signed-in user, when the auth manager lets them read DAG runs (the pages show what
    DAG runs did to the streams); 401 without a valid token, 403 without the permission.

    Airflow's own `get_user` decides who it is (a Bearer header first, else the `_token`
    cookie); it is imported here, not at module level, so processes that load plugins without
    serving the API (scheduler, DAG processor, workers) do not import the API server."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi.security import HTTPAuthorizationCredentials
    from fastapi.security.utils import get_authorization_scheme_param

    scheme, credentials = get_authorization_scheme_param(request.headers.get("Authorization"))
    bearer = (HTTPAuthorizationCredentials(scheme=scheme, credentials=credentials)
              if scheme.lower() == "bearer" and credentials else None)
    user = await get_user(request, None, bearer)
    if not get_auth_manager().is_authorized_dag(method="GET", access_entity=DagAccessEntity.RUN, user=user):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "Forbidden: the Streams pages need read access to DAG runs")
    return user


ReaderDep = Annotated[Any, Depends(reader)]


def key_query(key: str = "", operator: str = "0", state_var: str = "", join_side: str = "",
              store_name: str = "") -> KeyQuery:
    """The key and its state selectors from a request's query parameters."""
    return KeyQuery(key, operator or "0", state_var, join_side, store_name)


KeyQueryDep = Annotated[KeyQuery, Depends(key_query)]


CONFIGURATION_SECONDS = 5.0  # how long a configuration read is used again (a page and its lag requests)
_CONFIGURATIONS: dict[frozenset[str], tuple[float, Configuration]] = {}
_KEPT_LOCK = threading.Lock()  # what the server keeps between requests: configurations, histories as JSON


def _configuration(user: Any) -> Configuration:
    """Streams and stores, from the DAG runs this user may read. What is read (the Variables
    and up to 200 DAG runs) is used again for CONFIGURATION_SECONDS by the users who may read
    the same DAGs: a Streams page asks once for itself and once per stream for its lag."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.utils.session import create_session

    from airflow_provider_streamstate.plugins.sources import load_configuration

    with create_session() as session:
        dag_ids = frozenset(get_auth_manager().get_authorized_dag_ids(user=user, method="GET", session=session))
        now = time.monotonic()
        with _KEPT_LOCK:
            kept = _CONFIGURATIONS.get(dag_ids)
        if kept is not None and now - kept[0] < CONFIGURATION_SECONDS:
            return kept[1]
        config = load_configuration(session, dag_ids=set(dag_ids))
    with _KEPT_LOCK:
        for key in [k for k, (at, _) in _CONFIGURATIONS.items() if now - at >= CONFIGURATION_SECONDS]:
            del _CONFIGURATIONS[key]
        _CONFIGURATIONS[dag_ids] = (now, config)
    return config


def _stream(config: Configuration, stream: str, store: str | None) -> tuple[ConfiguredStream | None, str, str | None]:
    """(the configured stream or None, the store URL to read, its connection); a stream or a
    store the configuration does not know is refused."""
    try:
        validate_stream_name(stream)
    except UsageError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, exc.one_line()) from None
    cs = config.streams.get(stream)
    if store is not None:
        if store not in config.stores:
            raise HTTPException(status.HTTP_400_BAD_REQUEST,
                                f"unknown store {store!r}: the pages read only stores of the configured streams, "
                                "their DR stores and the Variable streamstate_stores")
        return cs, store, config.store_conn(store)
    if cs is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND,
                            f"stream {stream} is not configured (Variable streamstate_streams) and no recent DAG run "
                            "handled it; name its store with ?store=")
    return cs, cs.store, cs.storage_conn_id


def _dr(cs: ConfiguredStream | None, store: str) -> Any:
    """The stream's DR store when the page reads its primary one (None when it cannot be
    opened: the page then shows no DR column, and the log says why)."""
    from airflow_provider_streamstate.plugins.sources import open_configured_store

    if cs is None or not cs.dr_store or store != cs.store or cs.dr_store == store:
        return None
    try:
        return open_configured_store(cs.dr_store, cs.dr_storage_conn_id)
    except StreamstateError as exc:
        log.warning("stream %s: DR store %s not opened: %s", cs.name, cs.dr_store, exc.one_line())
        return None


def _engine_error(exc: StreamstateError) -> HTTPException:
    """404 for what does not exist, 400 for what cannot be asked (a key of the wrong shape, an
    operator lookups do not read), 502 for a store or file that failed."""
    if isinstance(exc, NotFoundError):
        code = status.HTTP_404_NOT_FOUND
    elif isinstance(exc, (UsageError, UnsupportedCheckpointError)):
        code = status.HTTP_400_BAD_REQUEST
    else:
        code = status.HTTP_502_BAD_GATEWAY
    return HTTPException(code, exc.one_line())


# --- the data of each page (shared by the pages and the JSON API) -----------------------------


def streams_data(user: Any) -> tuple[Configuration, list[tuple[ConfiguredStream, Any]]]:
    from concurrent.futures import ThreadPoolExecutor

    from airflow_provider_streamstate.engine.overview.streams import stream_row
    from airflow_provider_streamstate.plugins.sources import checkpoint_of, open_configured_store

    config = _configuration(user)
    now = datetime.now(UTC)

    def row(cs: ConfiguredStream) -> tuple[ConfiguredStream, Any]:
        from airflow_provider_streamstate.engine.overview.streams import StreamRow, StreamState

        try:
            return cs, stream_row(open_configured_store(cs.store, cs.storage_conn_id), cs.name,
                                  checkpoint=checkpoint_of(cs), dr_store=_dr(cs, cs.store), now=now)
        except Exception as exc:  # noqa: BLE001 - one stream's connection must not hide the others
            why = exc.one_line() if isinstance(exc, StreamstateError) else f"{type(exc).__name__}: {exc}"
            log.warning("stream %s: %s", cs.name, why)
            return cs, StreamRow(cs.name, cs.store, cs.checkpoint, StreamState("unknown", why, None, None, None),
                                 1, None, None, None, None, [why])
    with ThreadPoolExecutor(max_workers=8) as pool:
        rows = list(pool.map(row, config.streams.values()))
    return config, rows


def history_data(user: Any, stream: str, store: str | None) -> tuple[ConfiguredStream | None, Any]:
    from airflow_provider_streamstate.engine.catalog.snapshots import no_snapshots_error
    from airflow_provider_streamstate.engine.overview.history import stream_history
    from airflow_provider_streamstate.plugins.sources import open_configured_store

    cs, url, conn = _stream(_configuration(user), stream, store)
    try:
        opened = open_configured_store(url, conn)
        history = stream_history(opened, stream, dr_store=_dr(cs, url))
        if not history.snapshots:  # as `streamstate snapshot list` answers: an error naming what is there
            raise no_snapshots_error(opened, stream)
        return cs, history
    except StreamstateError as exc:
        raise _engine_error(exc) from None


def snapshot_data(user: Any, stream: str, snapshot_id: str, store: str | None) -> tuple[Any, Any, dict[str, str]]:
    from airflow_provider_streamstate.engine.overview.snapshot import snapshot_detail
    from airflow_provider_streamstate.plugins.sources import open_configured_store

    try:
        validate_snapshot_id(snapshot_id)
    except UsageError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, exc.one_line()) from None
    cs, url, conn = _stream(_configuration(user), stream, store)
    try:
        detail = snapshot_detail(open_configured_store(url, conn), stream, snapshot_id, dr_store=_dr(cs, url))
    except StreamstateError as exc:
        raise _engine_error(exc) from None
    calls = recovery_calls(stream=stream, snapshot_id=snapshot_id, store=url, storage_conn_id=conn,
                           checkpoint=cs.checkpoint if cs else None, configured_store=cs.store if cs else None)
    return detail, calls, _data_docs(snapshot_id)


def _data_docs(snapshot_id: str) -> dict[str, str]:
    """{suite: Data Docs location} of validation tasks that reported one for this snapshot
    (ValidateSnapshotOperator's XCom `data_docs`): the record itself does not keep it."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    out: dict[str, str] = {}
    with create_session() as session:
        query = (select(XComModel.value).where(XComModel.key == "return_value")
                 .where(XComModel.task_id.like("%validate%")).order_by(XComModel.dag_run_id.desc()).limit(500))
        for raw in session.scalars(query):
            try:
                value = json.loads(raw) if isinstance(raw, str | bytes) else raw
            except ValueError:
                continue
            if (isinstance(value, dict) and value.get("snapshot_id") == snapshot_id
                    and isinstance(value.get("data_docs"), str) and isinstance(value.get("suite"), str)):
                out.setdefault(value["suite"], value["data_docs"])
    return out


HISTORIES_KEPT = 16  # histories kept as JSON: one unchanged since (the same object) is not encoded again
_HISTORY_JSON: OrderedDict[tuple[str, str, str | None], tuple[Any, bytes]] = OrderedDict()


def history_json(history: Any) -> bytes:
    """A history's JSON answer, kept for the history it came from (engine/overview gives the
    same `StreamHistory` again while nothing in the store changed)."""
    key = (history.store, history.stream, history.dr_store)
    with _KEPT_LOCK:
        kept = _HISTORY_JSON.get(key)
    if kept is not None and kept[0] is history:
        return kept[1]
    body = JSONResponse(history.to_json()).body  # Starlette's own encoding of a JSON answer
    with _KEPT_LOCK:
        _HISTORY_JSON[key] = (history, bytes(body))
        _HISTORY_JSON.move_to_end(key)
        while len(_HISTORY_JSON) > HISTORIES_KEPT:
            _HISTORY_JSON.popitem(last=False)
    return bytes(body)


# --- key lookups (engine/lookup): no Spark, in this process, decoded partitions cached ----------

LOOKUP_CACHE_MB = 256  # default of [streamstate] lookup_cache_mb
LOOKUP_MAX_MB = 64  # default of [streamstate] lookup_max_mb: what one key request may read
HISTORY_LIMIT = 100  # snapshots a key's history page reads by default (the newest)
HISTORY_LIMIT_MAX = 1000
_LOOKUP_CACHE: Any = None
_LOOKUP_CACHE_LOCK = threading.Lock()


def lookup_cache() -> Any:
    """The API server's cache of decoded partitions, keyed by the sha256s of the blobs they
    were decoded from (so by content and partition), bounded by `[streamstate]
    lookup_cache_mb`: a second lookup in a partition is served from memory."""
    global _LOOKUP_CACHE
    with _LOOKUP_CACHE_LOCK:
        if _LOOKUP_CACHE is None:
            from airflow.configuration import conf

            from airflow_provider_streamstate.engine.lookup import PartitionCache

            mb = conf.getint("streamstate", "lookup_cache_mb", fallback=LOOKUP_CACHE_MB)
            _LOOKUP_CACHE = PartitionCache(max_entries=512, max_bytes=max(1, mb) << 20)
        return _LOOKUP_CACHE


def lookup_budget() -> int:
    """The bytes one key request (a lookup, a live lookup, a key's history) may read from its
    store or checkpoint, `[streamstate] lookup_max_mb`: what the cache answers is free; past
    it the request is refused (413) before the read, whatever the partition's size."""
    from airflow.configuration import conf

    return max(1, int(conf.getfloat("streamstate", "lookup_max_mb", fallback=LOOKUP_MAX_MB) * (1 << 20)))


def _key_error(exc: StreamstateError) -> HTTPException:
    from airflow_provider_streamstate.engine.core.errors import ReadBudgetExceeded

    if isinstance(exc, ReadBudgetExceeded):
        return HTTPException(413, exc.one_line())  # Content Too Large: Starlette's name for it changed
    return _engine_error(exc)


def _key(q: KeyQuery) -> Any:
    from airflow_provider_streamstate.engine.lookup import parse_key_text

    if not q.key.strip():
        raise UsageError("no key given", hint="pass ?key=column=value[,column2=value2] (or a JSON object)")
    return parse_key_text(q.key)


def key_lookup_data(user: Any, stream: str, snapshot_id: str, store: str | None, q: KeyQuery) -> Any:
    """One key of a snapshot (the KeyLookup), read from its blobs of the key's partition."""
    from airflow_provider_streamstate.engine.catalog.snapshots import get_snapshot
    from airflow_provider_streamstate.engine.lookup import SnapshotSource, lookup_key
    from airflow_provider_streamstate.plugins.sources import open_configured_store

    try:
        validate_snapshot_id(snapshot_id)
    except UsageError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, exc.one_line()) from None
    _, url, conn = _stream(_configuration(user), stream, store)
    try:
        opened = open_configured_store(url, conn)
        source = SnapshotSource(opened, stream, manifest=get_snapshot(opened, stream, snapshot_id))
        return lookup_key(source, key=_key(q), cache=lookup_cache(), max_bytes=lookup_budget(), **q.lookup_args())
    except StreamstateError as exc:
        raise _key_error(exc) from None


def live_lookup_data(user: Any, stream: str, q: KeyQuery, batch_id: int | None) -> Any:
    """One key of the configured stream's checkpoint, at its newest committed batch (or
    `batch_id`): read-only, consistent with that commit."""
    from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
    from airflow_provider_streamstate.engine.lookup import CheckpointSource, lookup_key
    from airflow_provider_streamstate.plugins.sources import checkpoint_of

    cs, _, _ = _stream(_configuration(user), stream, None)
    if cs is None or not cs.checkpoint:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"stream {stream} has no configured checkpoint")
    try:
        fs = checkpoint_of(cs)
        assert fs is not None
        source = CheckpointSource(cs.checkpoint, batch_id, reader=CheckpointReader(fs))
        return lookup_key(source, key=_key(q), cache=lookup_cache(), max_bytes=lookup_budget(), **q.lookup_args())
    except StreamstateError as exc:
        raise _key_error(exc) from None


def key_history_data(user: Any, stream: str, store: str | None, q: KeyQuery, *, start: str | None,
                     end: str | None, limit: int, first_where: str | None) -> Any:
    """A key's history (KeyHistory) over the newest `limit` snapshots of the range, or with
    `first_where` the first snapshot where that condition holds (KeyBisect)."""
    from airflow_provider_streamstate.engine.lookup import bisect_key, key_history
    from airflow_provider_streamstate.plugins.sources import open_configured_store

    if not 1 <= limit <= HISTORY_LIMIT_MAX:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, f"limit must be 1..{HISTORY_LIMIT_MAX}")
    _, url, conn = _stream(_configuration(user), stream, store)
    try:
        opened = open_configured_store(url, conn)
        if first_where:
            return bisect_key(opened, stream, key=_key(q), where=first_where, start=start or None, end=end or None,
                              cache=lookup_cache(), max_bytes=lookup_budget(), **q.lookup_args())
        return key_history(opened, stream, key=_key(q), start=start or None, end=end or None, limit=limit,
                           cache=lookup_cache(), max_bytes=lookup_budget(), **q.lookup_args())
    except StreamstateError as exc:
        raise _key_error(exc) from None


def data_docs_file(user: Any, stream: str, snapshot_id: str, suite: str, path: str, store: str | None) -> Any:
    """A file of the Data Docs a validation of the snapshot recorded (never another path)."""
    from airflow_provider_streamstate.engine.overview.data_docs import read_data_docs
    from airflow_provider_streamstate.plugins.sources import open_configured_store

    _, url, conn = _stream(_configuration(user), stream, store)
    try:
        return read_data_docs(open_configured_store(url, conn), stream, snapshot_id, suite, path)
    except StreamstateError as exc:
        raise _engine_error(exc) from None


# Data Docs run GX's scripts: in a sandbox (an opaque origin), they cannot reach Airflow's
# session or API from this origin.
DOCS_HEADERS = {"Content-Security-Policy": "sandbox allow-scripts allow-popups", "X-Content-Type-Options": "nosniff",
                "Cache-Control": "private, max-age=300"}


def diff_data(user: Any, stream: str, snapshot_id: str, store: str | None) -> tuple[str | None, dict[str, Any]]:
    """The state diff against the parent, by `streamstate diff` in a subprocess (a Spark job:
    its JVM never runs inside the API server); one at a time."""
    detail, _, _ = snapshot_data(user, stream, snapshot_id, store)
    if not detail.parent:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"snapshot {snapshot_id} has no parent to compare with")
    cs, url, conn = _stream(_configuration(user), stream, store)
    exe = shutil.which("streamstate", path=str(Path(sys.executable).parent)) or shutil.which("streamstate")
    cmd = [exe] if exe else [sys.executable, "-m", "airflow_provider_streamstate.cli"]
    cmd += ["diff", "--json", "--store", url, *(["--storage-conn-id", conn] if conn else []), "--stream", stream,
            detail.parent, snapshot_id]
    if not _DIFF_RUNNING.acquire(blocking=False):
        raise HTTPException(status.HTTP_429_TOO_MANY_REQUESTS, "a diff is running already: try again when it is done")
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=DIFF_TIMEOUT_S, env=os.environ.copy(),
                              check=False)
    except subprocess.TimeoutExpired:
        raise HTTPException(status.HTTP_504_GATEWAY_TIMEOUT, f"the diff took more than {DIFF_TIMEOUT_S:.0f}s") from None
    finally:
        _DIFF_RUNNING.release()
    if done.returncode != 0:  # the CLI's error (after Spark's own log lines), as one line
        at = done.stderr.rfind("streamstate: error:")
        lines = [ln.strip() for ln in done.stderr[max(at, 0):].splitlines() if ln.strip()]
        why = " ".join(lines if at >= 0 else lines[-1:])[:1000] or f"streamstate diff exited {done.returncode}"
        raise HTTPException(status.HTTP_502_BAD_GATEWAY, why)
    return detail.parent, json.loads(done.stdout)


# --- the app -------------------------------------------------------------------------------------


def create_app() -> FastAPI:
    app = FastAPI(title="streamstate: Streams", description="The Streams pages of the streamstate provider (read-only)",
                  docs_url=None, redoc_url=None, openapi_url="/api/openapi.json")

    def urls(request: Request) -> pages.Urls:
        return pages.Urls(request.scope.get("root_path", "") or URL_PREFIX, _airflow_root())

    @app.exception_handler(HTTPException)
    async def refused(request: Request, exc: HTTPException) -> Response:
        """API routes answer JSON; a page without a session goes to Airflow's login."""
        path = request.url.path[len(request.scope.get("root_path", "")):]
        if path.startswith("/api/"):
            return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)
        if exc.status_code == status.HTTP_401_UNAUTHORIZED:
            from airflow.api_fastapi.app import get_auth_manager

            return RedirectResponse(get_auth_manager().get_url_login(next_url=str(request.url)), status_code=303)
        return HTMLResponse(pages.message_page(urls(request), f"{exc.status_code}", str(exc.detail)),
                            status_code=exc.status_code)

    @app.get("/", include_in_schema=False)
    def root(request: Request) -> RedirectResponse:
        return RedirectResponse(urls(request).streams())

    @app.get("/static/icon.svg", include_in_schema=False)
    def icon() -> Response:
        return Response(ICON, media_type="image/svg+xml")

    @app.get("/streams", response_class=HTMLResponse)
    def streams_html(request: Request, user: ReaderDep) -> HTMLResponse:
        config, rows = streams_data(user)
        return HTMLResponse(pages.streams_page(urls(request), rows, config.problems))

    @app.get("/streams/{stream}", response_class=HTMLResponse)
    def history_html(request: Request, stream: str, user: ReaderDep,
                     store: str | None = None, page: int = 1) -> HTMLResponse:
        cs, history = history_data(user, stream, store)
        return HTMLResponse(pages.history_page(urls(request), history, cs, store, page))

    @app.get("/streams/{stream}/snapshots/{snapshot_id}", response_class=HTMLResponse)
    def snapshot_html(request: Request, stream: str, snapshot_id: str, user: ReaderDep, q: KeyQueryDep,
                      store: str | None = None) -> HTMLResponse:
        detail, calls, docs = snapshot_data(user, stream, snapshot_id, store)
        hit, error = None, None
        if q.key:
            try:
                hit = key_lookup_data(user, stream, snapshot_id, store, q)
            except HTTPException as exc:
                if exc.status_code in (401, 403):
                    raise
                error = str(exc.detail)
        lookup = key_pages.lookup_section(urls(request), detail, store, q, hit, error)
        return HTMLResponse(pages.snapshot_page(urls(request), detail, calls, store, docs, lookup),
                            status_code=400 if error else 200)

    @app.get("/streams/{stream}/keys", response_class=HTMLResponse)
    def key_history_html(request: Request, stream: str, user: ReaderDep, q: KeyQueryDep, store: str | None = None,
                         start: Annotated[str | None, Query(alias="from")] = None,
                         end: Annotated[str | None, Query(alias="to")] = None, limit: int = HISTORY_LIMIT,
                         first_where: str | None = None, field: str = "",
                         show_all: Annotated[str, Query(alias="all")] = "") -> HTMLResponse:
        history, bisect, error = None, None, None
        if q.key:
            try:
                found = key_history_data(user, stream, store, q, start=start, end=end, limit=limit,
                                         first_where=first_where)
                history, bisect = (None, found) if first_where else (found, None)
            except HTTPException as exc:
                if exc.status_code in (401, 403):
                    raise
                error = str(exc.detail)
        else:
            _stream(_configuration(user), stream, store)  # the store rules apply to the empty form too
        return HTMLResponse(key_pages.key_history_page(urls(request), stream, store, q, history, bisect, error,
                                                       field=field, show_all=bool(show_all), limit=limit,
                                                       start=start or "", end=end or "", first_where=first_where or ""),
                            status_code=400 if error else 200)

    @app.get("/streams/{stream}/snapshots/{snapshot_id}/data-docs/{suite}/{path:path}", include_in_schema=False)
    def data_docs(stream: str, snapshot_id: str, suite: str, path: str, user: ReaderDep,
                  store: str | None = None) -> Response:
        f = data_docs_file(user, stream, snapshot_id, suite, path, store)
        return Response(f.content, media_type=f.content_type, headers=DOCS_HEADERS)

    @app.get("/streams/{stream}/snapshots/{snapshot_id}/diff", response_class=HTMLResponse)
    def diff_html(request: Request, stream: str, snapshot_id: str, user: ReaderDep,
                  store: str | None = None) -> HTMLResponse:
        try:
            parent, result = diff_data(user, stream, snapshot_id, store)
        except HTTPException as exc:
            if exc.status_code in (401, 403):
                raise
            return HTMLResponse(pages.diff_page(urls(request), stream, snapshot_id, None, store, None, str(exc.detail)),
                                status_code=exc.status_code)
        return HTMLResponse(pages.diff_page(urls(request), stream, snapshot_id, parent, store, result, None))

    # The JSON answers are JSON-safe already (every `to_json`): sent as they are, not walked
    # again by FastAPI's response validation (a 1,000-snapshot history: ~2 ms of CPU a request).
    @app.get("/api/streams", response_model=dict[str, Any])
    def streams_api(user: ReaderDep) -> JSONResponse:
        config, rows = streams_data(user)
        return JSONResponse({"streams": [{**row.to_json(), "configured": cs.configured,
                                          "kafka_conn_id": cs.kafka_conn_id, "runs": [r.to_json() for r in cs.runs]}
                                         for cs, row in rows],
                             "stores": sorted(config.stores), "problems": config.problems})

    @app.get("/api/streams/{stream}", response_model=dict[str, Any])
    def history_api(stream: str, user: ReaderDep, store: str | None = None) -> Response:
        return Response(history_json(history_data(user, stream, store)[1]), media_type="application/json")

    @app.get("/api/streams/{stream}/lag")
    def lag_api(stream: str, user: ReaderDep) -> dict[str, Any]:
        """Kafka lag apart from the page: the brokers may be slow or unreachable."""
        from airflow_provider_streamstate.engine.overview.streams import kafka_lag
        from airflow_provider_streamstate.plugins.sources import broker_offsets_of, checkpoint_of

        cs, _, _ = _stream(_configuration(user), stream, None)
        assert cs is not None
        try:
            checkpoint = checkpoint_of(cs)
            offsets = broker_offsets_of(cs)
        except StreamstateError as exc:
            return {"available": False, "message": exc.one_line()}
        return dict(kafka_lag(checkpoint, offsets).to_json())

    @app.get("/api/streams/{stream}/snapshots/{snapshot_id}", response_model=dict[str, Any])
    def snapshot_api(stream: str, snapshot_id: str, user: ReaderDep,
                     store: str | None = None) -> JSONResponse:
        detail, calls, docs = snapshot_data(user, stream, snapshot_id, store)
        return JSONResponse({**detail.to_json(), "calls": calls.to_json(), "data_docs": docs})

    @app.get("/api/streams/{stream}/snapshots/{snapshot_id}/state")
    def key_api(stream: str, snapshot_id: str, user: ReaderDep, q: KeyQueryDep,
                store: str | None = None) -> dict[str, Any]:
        """One key of the snapshot (`?key=column=value,...&operator=&state_var=&join_side=&store_name=`)."""
        return {"stream": stream, "snapshot_id": snapshot_id,
                **key_lookup_data(user, stream, snapshot_id, store, q).to_json()}

    @app.get("/api/streams/{stream}/state")
    def live_key_api(stream: str, user: ReaderDep, q: KeyQueryDep, batch: int | None = None) -> dict[str, Any]:
        """One key of the stream's checkpoint at its newest committed batch (or `?batch=`)."""
        return {"stream": stream, **live_lookup_data(user, stream, q, batch).to_json()}

    @app.get("/api/streams/{stream}/keys")
    def key_history_api(stream: str, user: ReaderDep, q: KeyQueryDep, store: str | None = None,
                        start: Annotated[str | None, Query(alias="from")] = None,
                        end: Annotated[str | None, Query(alias="to")] = None, limit: int = HISTORY_LIMIT,
                        first_where: str | None = None) -> dict[str, Any]:
        """A key across the snapshots (`?key=...&from=&to=&limit=`), or the first snapshot
        where a condition on it holds (`&first_where=total > 100`)."""
        found = key_history_data(user, stream, store, q, start=start, end=end, limit=limit, first_where=first_where)
        return dict(found.to_json())

    @app.get("/api/streams/{stream}/snapshots/{snapshot_id}/diff")
    def diff_api(stream: str, snapshot_id: str, user: ReaderDep,
                 store: str | None = None) -> dict[str, Any]:
        parent, result = diff_data(user, stream, snapshot_id, store)
        return {"parent": parent, "snapshot_id": snapshot_id, "diff": result}

    return app
