"""The API server's key routes read at most `[streamstate] lookup_max_mb` per request: a
lookup, a live lookup or a key's history that would read more is refused with 413 and one
line saying the budget, before the read; within it they answer as before."""

from __future__ import annotations

import pytest

from tests.test_ui_plugin import airflow_app, auth, client, token  # noqa: F401 - the same app and auth

BUDGET_ENV = "AIRFLOW__STREAMSTATE__LOOKUP_MAX_MB"


@pytest.fixture
def tiny_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """A budget of 100 bytes: less than any state file of the test streams."""
    from airflow_provider_streamstate.plugins.app import lookup_cache

    lookup_cache().clear()  # nothing answered from memory: every request reads
    monkeypatch.setenv(BUDGET_ENV, str(100 / (1 << 20)))


def test_a_lookup_past_the_byte_budget_is_refused_in_one_line(client, token, airflow_app, tiny_budget) -> None:  # noqa: F811
    first = airflow_app["keys"]["ids"][0]
    r = client.get(f"/streamstate/api/streams/k/snapshots/{first}/state", params={"key": "k=a"}, headers=auth(token))
    assert r.status_code == 413
    detail = r.json()["detail"]
    assert "more than its budget of 100 bytes" in detail and "\n" not in detail
    live = client.get("/streamstate/api/streams/k/state", params={"key": "k=a"}, headers=auth(token))
    assert live.status_code == 413 and "budget" in live.json()["detail"]
    history = client.get("/streamstate/api/streams/k/keys", params={"key": "k=a"}, headers=auth(token))
    assert history.status_code == 413 and "budget of 100 bytes" in history.json()["detail"]


def test_within_the_default_budget_a_lookup_answers(client, token, airflow_app, monkeypatch) -> None:  # noqa: F811
    from airflow_provider_streamstate.plugins.app import LOOKUP_MAX_MB, lookup_budget, lookup_cache

    monkeypatch.delenv(BUDGET_ENV, raising=False)
    assert lookup_budget() == LOOKUP_MAX_MB << 20
    lookup_cache().clear()
    first = airflow_app["keys"]["ids"][0]
    hit = client.get(f"/streamstate/api/streams/k/snapshots/{first}/state", params={"key": "k=a"},
                     headers=auth(token)).json()
    assert hit["found"] is True and 0 < hit["bytes_read"] < LOOKUP_MAX_MB << 20 and hit["requests"] >= 1
