"""The Streams pages run inside Airflow's own API server app, behind Airflow's own auth: the
plugin is found through the provider info, a request without a valid token is refused (a
page redirects to the login), one with a token Airflow minted is answered, and the pages
show a configured stream with its state and newest snapshot, two timelines after a
rollback, and a failed validation as FAILED. Keys are looked up (a snapshot's, the live
checkpoint's, a key's history) with the same auth and store rules, from a bounded cache in
the server's process; Data Docs a validation recorded are served read-only; a history of
1,000 snapshots is paged and drawn by time; a configured store without snapshots of the
stream is an error, as in the CLI; no watermark reads "none"; a pin shows its reason. Real
stores, real snapshots, Airflow's SimpleAuthManager (as dev/airflow_home.py configures
Airflow), no mocks."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.unit.state_files import Aggregation
from tests.unit.store_history import at, put_snapshot, put_validation
from tests.unit.test_ui_overview import rolled_back_history


def key_stream(tmp: Path, store: Any) -> dict[str, Any]:
    """Stream `k`: real (HDFS-backed) state in three snapshots, key `a` 1 -> 3, and its
    checkpoint one batch further (a = 4); the last snapshot's validation wrote Data Docs."""
    from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot

    agg = Aggregation(tmp / "k-ckpt")
    ids = []
    for changes in ({"a": 1, "b": 1}, {"b": 2}, {"a": 3}):
        agg.commit(changes)
        ids.append(create_snapshot(str(agg.root), store, "k").manifest.snapshot_id)
    agg.commit({"a": 4})
    docs = tmp / "docs"
    (docs / "static").mkdir(parents=True)
    (docs / "index.html").write_text("<html><body>GX Data Docs of k</body></html>")
    (docs / "static" / "style.css").write_text("body { color: black }")
    (tmp / "secret.txt").write_text("not for the browser")
    put_validation(store, "k", ids[-1], "shape", False, data_docs=str(docs / "index.html"))
    return {"ids": ids, "checkpoint": str(agg.root), "docs": docs}


def long_stream(store: Any) -> list[str]:
    """Stream `long`: 1,000 snapshots an hour apart, every 100th failed a suite, one pinned."""
    from airflow_provider_streamstate.engine.catalog.retention import pin_snapshot

    start = at("2026-01-01T00:00")
    ids = [put_snapshot(store, "long", b, start + timedelta(hours=b), contents=[b"same"]).snapshot_id
           for b in range(1000)]
    for b in range(0, 1000, 100):
        put_validation(store, "long", ids[b], "shape", b < 500)
    pin_snapshot(store, "long", ids[250], reason="before the migration")
    return ids


@pytest.fixture(scope="module")
def airflow_app(airflow_dags: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Airflow's API server app with the provider's plugins loaded (provider plugins load when
    providers are discovered eagerly) and stream `s` in the Variable streamstate_streams."""
    import airflow.settings
    from airflow import plugins_manager
    from airflow.api_fastapi.app import create_app, purge_cached_app
    from airflow.models.variable import Variable

    from airflow_provider_streamstate.plugins import app as ui_app

    tmp = tmp_path_factory.mktemp("ui")
    ckpt, store, dr, ids = rolled_back_history(tmp)
    keys = key_stream(tmp, store)
    long_ids = long_stream(store)
    specs = [{"name": "s", "checkpoint": str(ckpt), "store": store.url},
             {"name": "k", "checkpoint": keys["checkpoint"], "store": store.url},
             {"name": "long", "checkpoint": str(tmp / "long-ckpt"), "store": store.url},
             {"name": "empty", "checkpoint": str(tmp / "empty-ckpt"), "store": store.url}]
    Variable.set("streamstate_streams", specs, serialize_json=True)
    secret = os.environ.get("AIRFLOW__API_AUTH__JWT_SECRET")
    os.environ["AIRFLOW__API_AUTH__JWT_SECRET"] = secrets.token_urlsafe(64)  # `airflow api-server` needs one too
    lazy = airflow.settings.LAZY_LOAD_PROVIDERS
    airflow.settings.LAZY_LOAD_PROVIDERS = False
    caches = (plugins_manager._get_plugins, plugins_manager.get_fastapi_plugins, plugins_manager._get_ui_plugins)
    for cache in caches:
        cache.cache_clear()
    # The server keeps a configuration it read for a few seconds: a module that shares these
    # fixtures (tests/test_ui_key_budget.py) and ran just before would leave its streams.
    ui_app._CONFIGURATIONS.clear()
    try:
        yield {"app": create_app(), "ids": ids, "store": store, "dr": dr, "keys": keys, "long": long_ids}
    finally:
        Variable.delete("streamstate_streams")
        if secret is None:
            os.environ.pop("AIRFLOW__API_AUTH__JWT_SECRET", None)
        else:
            os.environ["AIRFLOW__API_AUTH__JWT_SECRET"] = secret
        airflow.settings.LAZY_LOAD_PROVIDERS = lazy
        for cache in caches:
            cache.cache_clear()
        ui_app._CONFIGURATIONS.clear()
        purge_cached_app()


@pytest.fixture(scope="module")
def token(airflow_app: dict[str, Any]) -> str:
    """A JWT minted by Airflow's auth manager for its configured admin user."""
    from airflow.api_fastapi.app import get_auth_manager

    am = get_auth_manager()
    return am.generate_jwt(am.get_users()[0])


@pytest.fixture
def client(airflow_app: dict[str, Any]):  # noqa: ANN201
    from fastapi.testclient import TestClient

    with TestClient(airflow_app["app"]) as c:
        yield c


def test_the_plugin_is_loaded_from_the_provider_info_with_its_app_and_nav_view(airflow_app) -> None:
    from airflow import plugins_manager

    (plugin,) = [p for p in plugins_manager._get_plugins()[0] if p.name == "streamstate"]
    assert plugin.fastapi_apps[0]["url_prefix"] == "/streamstate"
    views = plugins_manager._get_ui_plugins()[0]
    assert [(v["url_route"], v["href"]) for v in views if v["name"] == "Streams"] == [("streams", "/streamstate/streams")]


@pytest.mark.parametrize("path", ["/streamstate/api/streams", "/streamstate/api/streams/s",
                                  "/streamstate/api/streams/s/lag"])
def test_the_api_refuses_a_request_without_a_token(client, path: str) -> None:
    assert client.get(path).status_code == 401


def test_a_page_without_a_session_redirects_to_airflows_login(client) -> None:
    r = client.get("/streamstate/streams", follow_redirects=False)
    assert r.status_code == 303 and "/auth/login" in r.headers["location"]


def test_a_forged_token_is_refused(client) -> None:
    forged = "eyJhbGciOiJIUzUxMiJ9.eyJzdWIiOiJhZG1pbiIsInJvbGUiOiJhZG1pbiJ9.bm90LXNpZ25lZA"
    assert client.get("/streamstate/api/streams", headers={"Authorization": f"Bearer {forged}"}).status_code == 403


def test_with_a_token_the_streams_page_lists_the_stream_its_state_and_newest_snapshot(client, token, airflow_app) -> None:
    ids = airflow_app["ids"]
    api = client.get("/streamstate/api/streams", headers={"Authorization": f"Bearer {token}"})
    assert api.status_code == 200
    # Other tests' DAG runs in the shared metadata DB name streams too: this one is "s".
    (row,) = [r for r in api.json()["streams"] if r["stream"] == "s"]
    assert (row["stream"], row["state"], row["newest"]["snapshot_id"]) == ("s", "absent", ids["11'"])
    client.cookies.set("_token", token)  # the session cookie the UI's login sets
    html = client.get("/streamstate/streams").text
    assert "data-stream='s'" in html and "state-absent" in html
    newest = ids["11'"]
    assert f"/streamstate/streams/s/snapshots/{newest}" in html


def test_the_history_shows_two_timelines_after_the_rollback(client, token, airflow_app) -> None:
    client.cookies.set("_token", token)
    html = client.get("/streamstate/streams/s").text
    assert "data-timeline='1' data-current='false'" in html
    assert "data-timeline='2' data-current='true'" in html
    history = client.get("/streamstate/api/streams/s", headers={"Authorization": f"Bearer {token}"}).json()
    assert [(t["timeline"], t["current"]) for t in history["timelines"]] == [(1, False), (2, True)]


def test_the_snapshot_page_shows_a_failed_validation_as_failed(client, token, airflow_app) -> None:
    client.cookies.set("_token", token)
    failed = airflow_app["ids"]["9'"]
    html = client.get(f"/streamstate/streams/s/snapshots/{failed}").text
    assert "class='validation failed'" in html and "FAILED" in html
    assert f"streamstate restore --store {airflow_app['store'].url} --stream s" in html


def test_a_store_the_configuration_does_not_know_is_refused(client, token, tmp_path) -> None:
    r = client.get("/streamstate/api/streams/s", params={"store": f"file://{tmp_path}"},
                   headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 400 and "unknown store" in r.json()["detail"]
    assert client.get("/streamstate/api/streams/other", headers={"Authorization": f"Bearer {token}"}).status_code == 404


def test_kafka_lag_without_a_kafka_connection_says_so(client, token) -> None:
    lag = client.get("/streamstate/api/streams/s/lag", headers={"Authorization": f"Bearer {token}"}).json()
    assert lag["available"] is False and "no Kafka connection" in lag["message"]


def test_streams_of_recent_dag_runs_are_listed_with_their_dr_store_for_users_who_may_read_the_dag(
        airflow_app, tmp_path) -> None:
    from datetime import UTC, datetime

    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    from airflow_provider_streamstate.plugins.sources import load_configuration

    other = {"name": "t", "checkpoint": str(tmp_path / "t"), "store": f"file://{tmp_path}/store"}
    dr_url = airflow_app["dr"].url
    with create_session() as session:
        session.add(DagRun(dag_id="streamstate_scheduled_snapshot", run_id="ui-test", run_type="manual",
                           conf={"streams": [other], "dr_store": dr_url}, state="success",
                           run_after=datetime.now(UTC)))
    try:
        with create_session() as session:
            seen = load_configuration(session, dag_ids={"streamstate_scheduled_snapshot"})
            hidden = load_configuration(session, dag_ids=set())
        t = seen.streams["t"]
        assert (t.configured, t.dr_store, [r.run_id for r in t.runs]) == (False, dr_url, ["ui-test"])
        assert dr_url in seen.stores and seen.streams["s"].configured
        assert "t" not in hidden.streams and dr_url not in hidden.stores
    finally:
        with create_session() as session:
            session.query(DagRun).filter(DagRun.run_id == "ui-test").delete()


def test_a_diff_needs_a_parent_and_is_refused_without_a_token(client, token, airflow_app) -> None:
    first = airflow_app["ids"][5]  # the first snapshot of the stream: no parent
    path = f"/streamstate/api/streams/s/snapshots/{first}/diff"
    assert client.get(path).status_code == 401
    r = client.get(path, headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 404 and "no parent" in r.json()["detail"]


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_a_key_of_a_snapshot_is_looked_up_by_the_api_with_the_same_auth_and_from_the_servers_cache(
        client, token, airflow_app) -> None:
    first = airflow_app["keys"]["ids"][0]
    path = f"/streamstate/api/streams/k/snapshots/{first}/state"
    assert client.get(path, params={"key": "k=a"}).status_code == 401
    hit = client.get(path, params={"key": "k=a"}, headers=auth(token)).json()
    assert (hit["found"], hit["value"], hit["batch_id"], hit["snapshot_id"]) == (True, {"n": 1}, 0, first)
    again = client.get(path, params={"key": "a"}, headers=auth(token)).json()
    assert again["cached"] is True and again["bytes_read"] == 0 and again["value"] == {"n": 1}
    missing = client.get(path, params={"key": "k=zz"}, headers=auth(token)).json()
    assert missing["found"] is False and missing["value"] is None
    bad = client.get(path, params={"key": "n=1"}, headers=auth(token))
    assert bad.status_code == 400 and "no column 'n'" in bad.json()["detail"]
    other = client.get(path, params={"key": "k=a", "store": "file:///elsewhere"}, headers=auth(token))
    assert other.status_code == 400 and "unknown store" in other.json()["detail"]


def test_a_key_of_the_live_checkpoint_is_its_newest_committed_value(client, token) -> None:
    hit = client.get("/streamstate/api/streams/k/state", params={"key": "k=a"}, headers=auth(token)).json()
    assert (hit["found"], hit["value"], hit["batch_id"]) == (True, {"n": 4}, 3)
    older = client.get("/streamstate/api/streams/k/state", params={"key": "k=a", "batch": 1}, headers=auth(token))
    assert older.json()["value"] == {"n": 1}


def test_the_snapshot_page_searches_a_key_and_links_its_history(client, token, airflow_app) -> None:
    client.cookies.set("_token", token)
    last = airflow_app["keys"]["ids"][-1]
    html = client.get(f"/streamstate/streams/k/snapshots/{last}").text
    assert "<form id=key-search" in html and "id=key-result" not in html
    html = client.get(f"/streamstate/streams/k/snapshots/{last}", params={"key": "k=a"}).text
    assert "id=key-result data-found='true'" in html and "{&quot;n&quot;: 3}" in html
    assert "/streamstate/streams/k/keys?key=k%3Da" in html
    bad = client.get(f"/streamstate/streams/k/snapshots/{last}", params={"key": "k=a,k=b"})
    assert bad.status_code == 400 and "data-found=error" in bad.text and "twice" in bad.text


def test_a_keys_history_shows_where_it_changed_in_a_table_a_chart_and_the_api(client, token, airflow_app) -> None:
    ids = airflow_app["keys"]["ids"]
    h = client.get("/streamstate/api/streams/k/keys", params={"key": "k=a"}, headers=auth(token)).json()
    assert [(v["batch_id"], v["value"], v["changed"]) for v in h["versions"]] == [
        (0, {"n": 1}, True), (1, {"n": 1}, False), (2, {"n": 3}, True)]
    assert h["blobs_read"] == h["distinct_blobs_read"]
    b = client.get("/streamstate/api/streams/k/keys", params={"key": "k=a", "first_where": "n >= 2"},
                   headers=auth(token)).json()
    assert b["first"]["snapshot_id"] == ids[2]
    client.cookies.set("_token", token)
    html = client.get("/streamstate/streams/k/keys", params={"key": "k=a"}).text
    assert "<svg xmlns='http://www.w3.org/2000/svg' id=key-chart" in html
    assert html.count("class=point data-batch=") == 3
    assert "<tr data-batch='2' class=changed>" in html and "<tr data-batch='1'" not in html  # changes only
    every = client.get("/streamstate/streams/k/keys", params={"key": "k=a", "all": "1"}).text
    assert "<tr data-batch='1'>" in every
    assert client.get("/streamstate/streams/k/keys", params={"key": "k=a", "limit": "0"}).status_code == 400


def test_data_docs_a_validation_recorded_are_served_read_only_behind_the_same_auth(client, token, airflow_app) -> None:
    last = airflow_app["keys"]["ids"][-1]
    base = f"/streamstate/streams/k/snapshots/{last}/data-docs/shape"
    assert client.get(f"{base}/index.html", follow_redirects=False).status_code in (303, 401)
    client.cookies.set("_token", token)
    page = client.get(f"{base}/index.html")
    assert page.status_code == 200 and "GX Data Docs of k" in page.text
    assert page.headers["content-security-policy"].startswith("sandbox")
    assert client.get(f"{base}/static/style.css").headers["content-type"].startswith("text/css")
    for escape in ("../secret.txt", "static/../../secret.txt", "%2e%2e/secret.txt"):
        assert client.get(f"{base}/{escape}").status_code in (400, 404), escape
    assert client.get(f"/streamstate/streams/k/snapshots/{last}/data-docs/other/index.html").status_code == 404
    html = client.get(f"/streamstate/streams/k/snapshots/{last}").text
    assert f"href='{base}/index.html'" in html and str(airflow_app["keys"]["docs"]) in html


def test_a_history_of_1000_snapshots_is_paged_and_drawn_by_time_with_the_marked_ones(client, token, airflow_app) -> None:
    client.cookies.set("_token", token)
    ids = airflow_app["long"]
    html = client.get("/streamstate/streams/long").text
    assert "data-page='1' data-pages='20'" in html and html.count("<tr data-snapshot=") == 50
    assert f"<tr data-snapshot='{ids[999]}'>" in html and f"<tr data-snapshot='{ids[949]}'>" not in html
    assert "<svg xmlns='http://www.w3.org/2000/svg' id=history class=by-time width=1150" in html
    assert html.count("class='snapshot marked'") == 11  # ten validated, one pinned
    page3 = client.get("/streamstate/streams/long", params={"page": 3}).text
    assert f"<tr data-snapshot='{ids[899]}'>" in page3 and "snapshots 101-150 of 1000" in page3


def test_a_configured_store_without_snapshots_of_the_stream_answers_like_the_cli(client, token) -> None:
    r = client.get("/streamstate/api/streams/empty", headers=auth(token))
    assert r.status_code == 404 and r.json()["detail"].startswith("stream empty has no snapshots in file://")
    client.cookies.set("_token", token)
    assert client.get("/streamstate/streams/empty").status_code == 404


def test_no_watermark_reads_none_and_a_pin_shows_its_reason(client, token, airflow_app) -> None:
    client.cookies.set("_token", token)
    html = client.get(f"/streamstate/streams/k/snapshots/{airflow_app['keys']['ids'][0]}").text
    assert "Watermark</td><td><span class=none>none</span>" in html and "0 ms" not in html
    pinned = client.get(f"/streamstate/streams/s/snapshots/{airflow_app['ids'][5]}").text
    assert "<span class=pin-reason>audit</span>" in pinned
