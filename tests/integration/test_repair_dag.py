"""The `streamstate_repair` DAG on a real stream: the example stream (spark-submit of the main
line, HDFS-backed state, the stack's Kafka broker) reads planted bad records (amounts no
real transaction has) for two accounts, then more good input. The DAG finds that the state
fails the suite, bisects to the last good snapshot, restores the two accounts' aggregates
to their values there on a clone and validates it, waits for a person's approval (given
through Airflow's REST API, as the UI does, after reading the plan it shows), stops the
stream, repairs it in place, validates it and resumes it; the stream then goes on from
where it was in Kafka, and its state ends as the repair and the input since say, exactly.
A rejected approval leaves the stream and its state as they were."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_streamstate.engine.catalog.snapshots import get_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.lookup import lookup_key
from airflow_provider_streamstate.engine.stores import open_store
from airflow_provider_streamstate.engine.streams import launcher
from airflow_provider_streamstate.jobs.generator import (
    GeneratorSpec,
    Transaction,
    expected_aggregates,
    produce,
)
from airflow_provider_streamstate.streams.start import start_stream
from tests.airflow_harness import Person
from tests.streams import consumed_records, example_stream_spec, use_local_connections, wait_for

pytestmark = pytest.mark.integration
log = logging.getLogger(__name__)

SUITE = {"name": "amounts-real", "expectations": [
    {"type": "expect_column_values_to_be_between", "kwargs": {"column": "value_max", "max_value": 100_000}}]}
POISONED = ("acct-00003", "acct-00007")
BAD_CENTS = 10**12


@pytest.fixture
def connections(stack: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    use_local_connections(monkeypatch, stack, tmp_path)


def produce_bad(bootstrap: str, topic: str) -> None:
    """One record no real transaction has per poisoned account (a bad producer's)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i, account in enumerate(POISONED):
        txn = Transaction(f"bad-{i}", account, BAD_CENTS, 1_700_000_000_000 + 150_500 + i)
        producer.produce(topic, key=account.encode(), value=txn.to_json())
    assert producer.flush(30) == 0


def combined(*parts: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for part in parts:
        for account, agg in part.items():
            have = out.setdefault(account, {"count": 0, "sum": 0, "max": 0})
            have.update(count=have["count"] + agg["count"], sum=have["sum"] + agg["sum"],
                        max=max(have["max"], agg["max"]))
    return out


def aggregates(checkpoint: str, accounts: Any) -> dict[str, dict[str, int]]:
    out = {}
    for account in accounts:
        hit = lookup_key(checkpoint, key={"account": account}, operator=0)
        assert hit.found, account
        out[account] = {k: hit.value[k] for k in ("count", "sum", "max")}
    return out


def test_bad_keys_are_repaired_on_a_clone_approved_then_repaired_in_place_and_the_stream_goes_on_exactly(
        stack, topic, tmp_path, connections, run_dag) -> None:
    spec = example_stream_spec(stack, topic, tmp_path).derive(kafka_conn_id="kafka_local")
    rounds = [GeneratorSpec(seed=67, accounts=12, events=120)]
    produce(stack.kafka_bootstrap, topic, rounds[0])
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps(SUITE))
    store = open_store(spec.store)
    try:
        start_stream(spec, startup_timeout_s=600, log=log)
        wait_for(lambda: consumed_records(spec.checkpoint) == 120, timeout=300, what="the first 120 records")
        good = create_snapshot(spec.checkpoint, store, spec.name).manifest.snapshot_id
        produce_bad(stack.kafka_bootstrap, topic)
        rounds.append(rounds[-1].next_round(60))
        produce(stack.kafka_bootstrap, topic, rounds[-1])
        wait_for(lambda: consumed_records(spec.checkpoint) == 182, timeout=300, what="the bad records and 60 more")
        poisoned = aggregates(spec.checkpoint, POISONED)
        assert all(a["max"] == BAD_CENTS for a in poisoned.values())

        conf = {"stream": spec.to_dict(), "suite": str(suite), "where": "max > 100000", "action": "restore"}

        # A person who reads the plan and rejects it: nothing changes.
        person = Person("streamstate_repair", "approve", "Reject")
        rejected = run_dag("streamstate_repair", conf)
        asked = person.asked()
        assert rejected.state == "success", rejected.log[-5000:]
        assert rejected.tasks["approve"].state == "success" and rejected.tasks["stop"].state == "skipped"
        assert rejected.tasks["rollback"].state == rejected.tasks["repaired"].state == "skipped"
        assert launcher.status(spec.checkpoint).state == "running"
        assert aggregates(spec.checkpoint, POISONED) == poisoned
        assert asked["subject"] == f"Repair 2 key(s) of stream {spec.name}?"
        for account in POISONED:
            assert f'| {{"account": "{account}"}} |' in asked["body"] and f'"max": {BAD_CENTS}' in asked["body"]
        assert rejected.tasks["tear_down"].xcom["clones_expired"] == 1

        # Approved: repaired on a clone, validated, then in place; the stream resumes.
        person = Person("streamstate_repair", "approve", "Approve")
        repaired = run_dag("streamstate_repair", conf)
        person.asked()
        assert repaired.state == "success", repaired.log[-5000:]
        plan = repaired.tasks["plan"].xcom
        assert (plan["keys"], plan["last_good"]) == (2, good)
        assert repaired.tasks["bisect"].xcom["last_good"] == good
        clone = repaired.tasks["repair_clone"].xcom
        assert not clone["in_place"] and clone["spark"]["keys_checked"] == 2
        assert repaired.tasks["validate_clone"].xcom["success"] is True
        done = repaired.tasks["repair"].xcom
        assert done["in_place"] and done["pinned"] == done["source_snapshot"]
        assert done["spark"]["keys_checked"] == 2 and repaired.tasks["validate_repaired"].xcom["success"] is True
        labels = get_snapshot(store, spec.name, done["edited_snapshot"]).labels
        assert labels["edited-from"] == done["source_snapshot"] and labels["edit"] == plan["description"]
        # Who approved it (the API's user), and where.
        assert re.fullmatch(r"admin \(approved in streamstate_repair/manual__.+\)", labels["edited-by"]), labels
        assert repaired.tasks["rollback"].state == "skipped"
        assert repaired.tasks["repaired"].xcom == {"stream": spec.name, "edited_snapshot": done["edited_snapshot"],
                                                    "pinned": done["pinned"], "edit_batch": done["edit_batch"],
                                                    "launch_id": repaired.tasks["resume"].xcom["launch_id"]}
        assert repaired.tasks["tear_down"].xcom["clones_expired"] == 1
        assert not Path(plan["clone_checkpoint"]).exists()
        assert store.list_snapshot_ids(plan["clone_name"]) == []

        # The stream goes on from where it was: the repaired accounts from their good values.
        assert launcher.status(spec.checkpoint).state == "running"
        rounds.append(rounds[-1].next_round(60))
        produce(stack.kafka_bootstrap, topic, rounds[-1])
        wait_for(lambda: consumed_records(spec.checkpoint) == 242, timeout=300, what="60 records after the repair")
        assert launcher.stop(spec.checkpoint, timeout_s=120).outcome == "stopped"
    finally:
        launcher.stop(spec.checkpoint, timeout_s=30)
    everyone = expected_aggregates(rounds)
    after = expected_aggregates(rounds[2:])
    repaired_keys = combined({a: v for a, v in expected_aggregates(rounds[:1]).items() if a in POISONED},
                             {a: v for a, v in after.items() if a in POISONED})
    assert aggregates(spec.checkpoint, everyone) == {**everyone, **repaired_keys}
