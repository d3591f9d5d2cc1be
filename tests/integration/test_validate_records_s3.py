"""Validation records in an S3 store behave as in a local one: write-once (a conditional
put), read back strictly, listed per snapshot, and `latest-good:<suite>` resolves from them."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_provider_streamstate.engine.catalog.snapshots import resolve_snapshot
from airflow_provider_streamstate.engine.catalog.validation_records import (
    ExpectationOutcome,
    ValidationRecord,
    get_validation,
    put_validation,
    validation_key,
    validation_status,
)
from airflow_provider_streamstate.engine.core.errors import UnsafeManifestError
from airflow_provider_streamstate.engine.stores.base import ManifestExistsError
from tests.unit.store_history import at, put_snapshot

pytestmark = pytest.mark.integration


def record(snapshot_id: str, batch: int, ok: bool, suite: str = "sane") -> ValidationRecord:
    outcome = ExpectationOutcome("expect_column_values_to_be_between", {"column": "value_max"}, ok, None)
    return ValidationRecord("orders", snapshot_id, batch, suite, "ef" * 32, ok, "2026-11-22T09:00:00Z", "1.24.1", 2.0,
                            {"operator": 0, "store_name": None, "join_side": None}, [outcome])


def test_records_in_s3_are_write_once_strict_and_resolve_latest_good(make_store) -> None:
    store, _, _ = make_store("s3")
    start = at("2026-11-22T08:00")
    ids = [put_snapshot(store, "orders", b, start + timedelta(minutes=b)).snapshot_id for b in range(3)]
    for b, ok in enumerate((True, True, False)):
        put_validation(store, record(ids[b], b, ok))
    put_validation(store, record(ids[0], 0, False, suite="strict"))
    with pytest.raises(ManifestExistsError):
        store.put_record(validation_key("orders", ids[1], "sane"), record(ids[1], 1, False).to_bytes())
    assert get_validation(store, "orders", ids[1], "sane") == record(ids[1], 1, True)
    assert resolve_snapshot(store, "orders", "latest-good:sane").snapshot_id == ids[1]
    assert validation_status(store, "orders") == {ids[0]: {"sane": True, "strict": False}, ids[1]: {"sane": True},
                                                  ids[2]: {"sane": False}}
    store.put_record(validation_key("orders", ids[2], "forged"), b'{"format": "streamstate.validation/v1"}')
    with pytest.raises(UnsafeManifestError, match="validation record orders/.*/forged is invalid"):
        get_validation(store, "orders", ids[2], "forged")
    assert validation_status(store, "orders")[ids[2]] == {"forged": None, "sane": False}
