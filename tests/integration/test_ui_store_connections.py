"""The Streams pages keep the stores they show open, one per (store URL, Airflow connection):
two AWS connections that name one `s3://` URL on two endpoints (here the stack's primary
and DR regions, which have a bucket of the same name) are two stores, each listing what
its own endpoint holds, and the cache keeps only the most recently used ones."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.plugins import sources
from tests.unit.fake_checkpoint import make_checkpoint, store_dirs, write

pytestmark = pytest.mark.integration


def _aws_connection(stack, region: str) -> str:  # noqa: ANN001
    env = stack.s3_env(region)
    return json.dumps({"conn_type": "aws", "login": env["AWS_ACCESS_KEY_ID"], "password": env["AWS_SECRET_ACCESS_KEY"],
                       "extra": {"endpoint_url": env["AWS_ENDPOINT_URL"], "region_name": env["AWS_DEFAULT_REGION"]}})


def test_two_connections_to_one_store_url_are_two_stores_and_the_cache_is_bounded(
    stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_UI_PRIMARY", _aws_connection(stack, "primary"))
    monkeypatch.setenv("AIRFLOW_CONN_UI_DR", _aws_connection(stack, "dr"))
    monkeypatch.setattr(sources, "_STORES", {})
    assert stack.s3["primary"]["bucket"] == stack.s3["dr"]["bucket"]
    url = f"s3://{stack.s3['primary']['bucket']}/ui-{uuid.uuid4().hex[:8]}"

    primary = sources.open_configured_store(url, "ui_primary")
    ckpt = make_checkpoint(tmp_path / "ckpt", batches=2)
    for d in store_dirs(ckpt):
        for version in (1, 2):
            write(d / f"{version}.delta", f"delta {version}")
    snap = create_snapshot(str(ckpt), primary, "orders").manifest

    dr = sources.open_configured_store(url, "ui_dr")
    assert dr is not primary
    assert list(primary.list_snapshot_ids("orders")) == [snap.snapshot_id]
    assert list(dr.list_snapshot_ids("orders")) == []  # the DR endpoint holds nothing under that URL
    assert sources.open_configured_store(url, "ui_primary") is primary  # opened once, then reused

    monkeypatch.setattr(sources, "MAX_STORES", 2)
    sources.open_configured_store(str(tmp_path / "local-store"), None)  # the third: the least recent goes
    assert set(sources._STORES) == {(url, "ui_primary"), (str(tmp_path / "local-store"), None)}
