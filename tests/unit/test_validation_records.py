"""Validation records are write-once, round-trip through a store, and are untrusted input:
a damaged or hostile record is refused in one line and never counts as a pass. Suites and
state selections that cannot work are refused before any Spark work, one clear line each."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.catalog.snapshots import resolve_snapshot
from airflow_provider_streamstate.engine.catalog.validation_records import (
    ExpectationOutcome,
    ValidationRecord,
    get_validation,
    put_validation,
    validation_key,
    validation_status,
)
from airflow_provider_streamstate.engine.core.errors import NotFoundError, UnsafeManifestError, UsageError
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.state.reader import StateReader, StateSelector
from airflow_provider_streamstate.engine.state.validation import load_suite
from airflow_provider_streamstate.engine.stores.base import ManifestExistsError
from tests.unit.fake_checkpoint import make_checkpoint, store_dirs, write

SUITE_SHA = "ab" * 32


def record(snapshot_id: str, success: bool, *, suite: str = "accounts", stream: str = "orders") -> ValidationRecord:
    outcomes = [
        ExpectationOutcome("expect_column_values_to_not_be_null", {"column": "key_account"}, True, None),
        ExpectationOutcome("expect_column_max_to_be_between", {"column": "value_max", "max_value": 100000},
                           success, 250 if success else 10**9),
    ]
    batch = int(snapshot_id[:12])
    return ValidationRecord(stream, snapshot_id, batch, suite, SUITE_SHA, success, "2026-11-22T08:00:00.5Z", "1.24.1",
                            1.5, {"operator": None, "store_name": None, "join_side": None}, outcomes)


@pytest.fixture
def history(tmp_path: Path) -> tuple[LocalStore, list[str], Path]:
    """A fake HDFS checkpoint snapshotted at batches 0..3 into a local store."""
    ckpt = make_checkpoint(tmp_path / "ckpt", batches=4)
    for d in store_dirs(ckpt):
        for v in range(1, 5):
            write(d / f"{v}.delta", f"state {v} of {d}")
    store = LocalStore(tmp_path / "store")
    ids = [create_snapshot(str(ckpt), store, "orders", batch_id=b).manifest.snapshot_id for b in range(4)]
    return store, ids, ckpt


def test_a_record_survives_the_store_round_trip(history) -> None:
    store, ids, _ = history
    rec = record(ids[1], False)
    assert put_validation(store, rec) == rec
    back = get_validation(store, "orders", ids[1], "accounts")
    assert back == rec
    raw = json.loads(store.get_record(validation_key("orders", ids[1], "accounts")))
    # The fields retention and replication rely on.
    assert (raw["snapshot_id"], raw["suite"], raw["success"]) == (ids[1], "accounts", False)
    assert raw["validated_at"].endswith("Z")
    assert (raw["evaluated"], raw["failed"]) == (2, 1)


def test_a_record_is_write_once_and_a_second_writer_gets_the_first_result(history) -> None:
    store, ids, _ = history
    first = record(ids[0], True)
    put_validation(store, first)
    with pytest.raises(ManifestExistsError):
        store.put_record(validation_key("orders", ids[0], "accounts"), record(ids[0], False).to_bytes())
    assert put_validation(store, record(ids[0], False)) == first
    assert get_validation(store, "orders", ids[0], "accounts").success is True


def hostile(base: dict, **changes: object) -> bytes:
    return json.dumps({**base, **changes}).encode()


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"format": "streamstate.validation/v9"}, "format"),
        ({"success": "yes"}, "success 'yes' is not true or false"),
        ({"success": True}, "says success=True while its expectations say otherwise"),
        ({"snapshot_id": "000000000009-20261122T080000000000Z"}, "its snapshot_id"),
        ({"suite": "other"}, "its suite"),
        ({"stream": "payments"}, "its stream"),
        ({"validated_at": "yesterday"}, "not an ISO time"),
        ({"validated_at": "2026-11-22T08:00:00+02:00"}, "not in UTC"),
        ({"validated_at": "2026-11-22T08:00:00"}, "not in UTC"),
        ({"suite_sha256": "../../etc"}, "suite_sha256"),
        ({"batch_id": 7}, "is not the snapshot's"),
        ({"duration_s": -1}, "duration_s"),
        ({"results": [{"type": "rm -rf /", "success": True}]}, "has type"),
        ({"results": "all fine"}, "results is not a list"),
        ({"evaluated": 99}, "evaluated 99 does not match"),
    ],
)
def test_a_hostile_record_is_refused_in_one_line(history, change, words) -> None:
    store, ids, _ = history
    base = record(ids[2], False).to_json()
    store.put_record(validation_key("orders", ids[2], "accounts"), hostile(base, **change))
    with pytest.raises(UnsafeManifestError) as exc:
        get_validation(store, "orders", ids[2], "accounts")
    line = exc.value.one_line()
    assert words in line and "\n" not in line


@pytest.mark.parametrize("data", [b"not json", b"[1,2]", b"[" * 100_000, b"{" + b" " * (5 * 1024 * 1024) + b"}"])
def test_records_that_are_not_json_objects_or_too_deep_or_too_big_are_refused(history, data) -> None:
    store, ids, _ = history
    store.put_record(validation_key("orders", ids[2], "accounts"), data)
    with pytest.raises(UnsafeManifestError, match="validation record orders/.*/accounts is invalid"):
        get_validation(store, "orders", ids[2], "accounts")


def test_latest_good_is_the_newest_snapshot_that_passed_and_a_damaged_record_never_counts(history) -> None:
    store, ids, _ = history
    put_validation(store, record(ids[0], True))
    put_validation(store, record(ids[1], True))
    put_validation(store, record(ids[2], False))
    assert resolve_snapshot(store, "orders", "latest-good:accounts").snapshot_id == ids[1]
    # A forged "pass" on the newest snapshot that contradicts its own results is not trusted.
    forged = record(ids[3], False).to_json() | {"success": True}
    store.put_record(validation_key("orders", ids[3], "accounts"), json.dumps(forged).encode())
    assert resolve_snapshot(store, "orders", "latest-good:accounts").snapshot_id == ids[1]
    assert validation_status(store, "orders") == {
        ids[0]: {"accounts": True}, ids[1]: {"accounts": True}, ids[2]: {"accounts": False}, ids[3]: {"accounts": None},
    }
    with pytest.raises(NotFoundError, match="no snapshot of orders on its current timeline has passed suite other"):
        resolve_snapshot(store, "orders", "latest-good:other")
    with pytest.raises(UsageError, match="invalid suite name"):
        resolve_snapshot(store, "orders", "latest-good:../x")


def write_suite(tmp_path: Path, body: object) -> Path:
    path = tmp_path / "suite.json"
    path.write_text(body if isinstance(body, str) else json.dumps(body))
    return path


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (None, "suite file .* does not exist"),
        ("{not json", "is not valid JSON"),
        ([1, 2], "is not a JSON object"),
        ({"expectations": []}, "has no name"),
        ({"name": "has space", "expectations": []}, "invalid suite name"),
        ({"name": "s", "expectations": {}}, "has no expectations list"),
        ({"name": "s", "expectations": [{"type": "expect_column_values_to_be_betwen", "kwargs": {"column": "a"}}]},
         "unknown expectation type 'expect_column_values_to_be_betwen'.*did you mean expect_column_values_to_be_between"),
        ({"name": "s", "expectations": [{"type": "expect_column_values_to_not_be_null", "kwargs": {"colum": "a"}}]},
         "expectation 0 \\(expect_column_values_to_not_be_null\\) has invalid arguments"),
    ],
)
def test_a_suite_that_cannot_run_is_refused_in_one_line(tmp_path, body, words) -> None:
    path = tmp_path / "missing.json" if body is None else write_suite(tmp_path, body)
    with pytest.raises(UsageError) as exc:
        load_suite(path)
    assert re.search(words, exc.value.one_line()), exc.value.one_line()
    assert "\n" not in exc.value.one_line()


def test_a_suite_hash_ignores_gx_generated_ids_but_not_its_rules(tmp_path) -> None:
    rule = {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "key_account"}}
    a = load_suite(write_suite(tmp_path, {"name": "s", "expectations": [{**rule, "id": "1"}], "meta": {}}))
    b = load_suite({"name": "s", "expectations": [{**rule, "id": "2"}],
                    "meta": {"great_expectations_version": "1.24.1"}})
    c = load_suite({"name": "s", "expectations": [{**rule, "kwargs": {"column": "key_other"}}]})
    assert a.sha256 == b.sha256
    assert a.sha256 != c.sha256


def test_an_operator_the_snapshot_does_not_have_is_named_with_those_it_has(history, tmp_path) -> None:
    store, ids, _ = history
    with StateReader(store, workdir=tmp_path / "work") as reader:
        for sel, words in [
            (StateSelector(operator=7), "has no stateful operator 7; operators there: 0 \\(stateStoreSave\\)"),
            (StateSelector(operator="dedupe"), "has no stateful operator 'dedupe'"),
            (StateSelector(store_name="left-keyToNumValues"), "has no state store 'left-keyToNumValues'"),
            (StateSelector(join_side="left"), "is not a stream-stream join"),
        ]:
            with pytest.raises((NotFoundError, UsageError)) as exc:
                reader.state("orders", ids[1], sel)
            assert re.search(words, exc.value.one_line()), exc.value.one_line()
        assert reader.materialised == 1  # materialised once, whatever was asked of it
        work = next((tmp_path / "work").iterdir())
        assert (work / f"0000-{ids[1]}" / "offsets" / "1").exists()
    assert not any((tmp_path / "work").iterdir())  # close() removed the copy


def test_a_snapshot_id_of_another_stream_is_not_found_under_this_one(history, tmp_path) -> None:
    store, ids, ckpt = history
    create_snapshot(str(ckpt), store, "payments", batch_id=3, new_timeline=True)
    with StateReader(store, workdir=tmp_path / "work") as reader, pytest.raises(NotFoundError) as exc:
        reader.state("payments", ids[0])
    assert ids[0] in exc.value.one_line() and "\n" not in exc.value.one_line()


def test_a_stored_result_answers_however_the_operator_is_named_and_a_changed_suite_is_refused(history, tmp_path) -> None:
    from airflow_provider_streamstate.engine.state.validation import Suite, validate_snapshot

    store, ids, _ = history
    suite = Suite("accounts", {"name": "accounts", "expectations": [], "meta": {}}, "test")
    stored = ValidationRecord("orders", ids[1], 1, "accounts", suite.sha256, True, "2026-11-22T08:00:00Z", "1.24.1",
                              1.0, {"operator": 0, "store_name": None, "join_side": None}, [])
    put_validation(store, stored)
    with StateReader(store, workdir=tmp_path / "work") as reader:
        for named in (None, 0, "0", "stateStoreSave"):
            result = validate_snapshot(reader, "orders", ids[1], suite, selector=StateSelector(operator=named))
            assert (result.reused, result.record) == (True, stored), named
        changed = Suite("accounts", {"name": "accounts", "expectations": [], "meta": {"v": 2}}, "test")
        with pytest.raises(UsageError, match="already has a result for suite accounts from a different definition"):
            validate_snapshot(reader, "orders", ids[1], changed)
        assert reader.materialised == 0  # nothing was read: the record answered


def test_a_suite_keeps_its_hash_after_it_ran_so_a_later_process_reuses_its_stored_result(spark) -> None:
    """GX writes its version into the `meta` it is given: the suite must hand it a copy, or
    the record's sha256 (taken after the run) is not the suite's, and the next run of the same
    suite (another process, a cluster job) is refused as "a different definition"."""
    from airflow_provider_streamstate.engine.state.validation import run_suite

    body = {"name": "keys-present", "meta": {"streamstate": {"operator": 0}},
            "expectations": [{"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "key_account"}}]}
    suite = load_suite(json.loads(json.dumps(body)))
    before = suite.sha256
    run = run_suite(spark.createDataFrame([("a",), ("b",)], "key_account string"), suite)
    assert run.success
    assert suite.sha256 == before == load_suite(json.loads(json.dumps(body))).sha256
