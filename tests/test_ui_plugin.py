"""The Streams pages run inside Airflow's own API server app, behind Airflow's own auth: the
plugin is found through the provider info, a request without a valid token is refused (a
page redirects to the login), one with a token Airflow minted is answered, and the pages
show a configured stream with its state and newest snapshot, two timelines after a
rollback, and a failed validation as FAILED. Real stores, real snapshots, Airflow's
SimpleAuthManager (as dev/airflow_home.py configures Airflow), no mocks."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_ui_overview import rolled_back_history


@pytest.fixture(scope="module")
def airflow_app(airflow_dags: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Airflow's API server app with the provider's plugins loaded (provider plugins load when
    providers are discovered eagerly) and stream `s` in the Variable streamstate_streams."""
    import airflow.settings
    from airflow import plugins_manager
    from airflow.api_fastapi.app import create_app, purge_cached_app
    from airflow.models.variable import Variable

    tmp = tmp_path_factory.mktemp("ui")
    ckpt, store, dr, ids = rolled_back_history(tmp)
    spec = {"name": "s", "checkpoint": str(ckpt), "store": store.url}
    Variable.set("streamstate_streams", [spec], serialize_json=True)
    secret = os.environ.get("AIRFLOW__API_AUTH__JWT_SECRET")
    os.environ["AIRFLOW__API_AUTH__JWT_SECRET"] = secrets.token_urlsafe(64)  # `airflow api-server` needs one too
    lazy = airflow.settings.LAZY_LOAD_PROVIDERS
    airflow.settings.LAZY_LOAD_PROVIDERS = False
    caches = (plugins_manager._get_plugins, plugins_manager.get_fastapi_plugins, plugins_manager._get_ui_plugins)
    for cache in caches:
        cache.cache_clear()
    try:
        yield {"app": create_app(), "ids": ids, "store": store, "dr": dr}
    finally:
        Variable.delete("streamstate_streams")
        if secret is None:
            os.environ.pop("AIRFLOW__API_AUTH__JWT_SECRET", None)
        else:
            os.environ["AIRFLOW__API_AUTH__JWT_SECRET"] = secret
        airflow.settings.LAZY_LOAD_PROVIDERS = lazy
        for cache in caches:
            cache.cache_clear()
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
    assert [(v["url_route"], v["href"]) for v in views if v["name"] == "Streams"] == [("streamstate", "/streamstate/streams")]


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
