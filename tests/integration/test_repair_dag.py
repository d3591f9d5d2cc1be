"""The `streamstate_repair` DAG on a real stream, through each of its branches: the example
stream (spark-submit of the main line, HDFS-backed state, the stack's Kafka broker) reads
planted bad records (amounts no real transaction has) for two accounts, then more good
input. One stream serves every test of this file, in order; each DAG run finds that the
state fails the suite, bisects to the last good snapshot and plans the repair of the keys
`where` selects on a clone, then:

- a clone that still fails the suite (a `where` too narrow) ends the run before anyone is
  asked;
- an approval nobody answers times out (the scheduler's own sweep, `approval_hours` short);
- a person (through Airflow's REST API, as the UI does) rejects the plan;
- a person approves, but a third account went bad while they decided: the repaired state
  fails the suite and the rollback puts the stream back as it was;
- a person approves: the stream is stopped, repaired in place, validated and resumed, and
  goes on from where it was in Kafka; its state ends as the repair and the input since say,
  exactly.

Every run but the last leaves the stream running with the state it had and deletes its
clone; the tests assert it by the lookups of every account. Only the approved run has
Spark's check of the clone and of the repaired state (the check is most of a run's time);
the others skip it (`spark_check` false, as on Spark 3.5)."""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_streamstate.engine.catalog.retention import pinned_ids
from airflow_provider_streamstate.engine.catalog.snapshots import get_snapshot, resolve_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.lookup import lookup_key
from airflow_provider_streamstate.engine.stores import open_store
from airflow_provider_streamstate.engine.streams import launcher
from airflow_provider_streamstate.engine.streams.clones import list_clones
from airflow_provider_streamstate.jobs.generator import (
    GeneratorSpec,
    Transaction,
    ensure_topic,
    expected_aggregates,
    produce,
)
from airflow_provider_streamstate.streams.start import start_stream
from tests.airflow_harness import DagResult, NoAnswer, Person
from tests.streams import consumed_records, example_stream_spec, use_local_connections, wait_for

pytestmark = pytest.mark.integration
log = logging.getLogger(__name__)

SUITE = {"name": "amounts-real", "expectations": [
    {"type": "expect_column_values_to_be_between", "kwargs": {"column": "value_max", "max_value": 100_000}}]}
POISONED = ("acct-00003", "acct-00007")
LATE = "acct-00005"  # goes wrong while a person decides (the rollback's test)
BAD_CENTS = 10**12
AFTER_APPROVAL = ("stop", "repair", "validate_repaired", "resume")


@dataclass
class PoisonedStream:
    """The running example stream whose state fails the suite, and what went into it."""

    spec: Any
    topic: str
    store: Any
    suite: Path
    good: str  # the last snapshot that passes the suite
    accounts: list[str]
    rounds: list[GeneratorSpec] = field(default_factory=list)
    records: int = 0  # read from Kafka so far

    def conf(self, **more: Any) -> dict[str, Any]:
        """The repair of every key whose max no real transaction has, from the last good values."""
        return {"stream": self.spec.to_dict(), "suite": str(self.suite), "where": "max > 100000",
                "action": "restore", **more}

    def state(self) -> dict[str, dict[str, int]]:
        """Every account's aggregate, looked up in the checkpoint."""
        return aggregates(self.spec.checkpoint, self.accounts)

    def launch_id(self) -> str:
        status = launcher.status(self.spec.checkpoint)
        assert status.state == "running" and status.handle is not None, status.to_json()
        return status.handle.launch_id


def produce_bad(bootstrap: str, topic: str, accounts: tuple[str, ...]) -> None:
    """One record no real transaction has per account (a bad producer's)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for account in accounts:
        txn = Transaction(f"bad-{account}", account, BAD_CENTS, 1_700_000_000_000 + 150_500)
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


@pytest.fixture(scope="module")
def stream(stack: Any, airflow_dags: Path, tmp_path_factory: pytest.TempPathFactory,
           spark: Any) -> Iterator[PoisonedStream]:
    """The example stream running on 120 good records (snapshot `good`), then a bad record
    for each of POISONED and 60 more good ones: its state fails SUITE. The validations the
    DAG's tasks run read state in the worker's shared session (`spark`): without one, each
    test's tasks would start a JVM of their own, shut down after the test (tests/spark_jvm.py)."""
    root = tmp_path_factory.mktemp("repair")
    topic = f"t-{uuid.uuid4().hex[:10]}"
    ensure_topic(stack.kafka_bootstrap, topic, partitions=3)
    with pytest.MonkeyPatch.context() as env:
        use_local_connections(env, stack, root)
        spec = example_stream_spec(stack, topic, root).derive(kafka_conn_id="kafka_local")
        suite = root / "suite.json"
        suite.write_text(json.dumps(SUITE))
        store = open_store(spec.store)
        first = GeneratorSpec(seed=67, accounts=12, events=120)
        produce(stack.kafka_bootstrap, topic, first)
        try:
            start_stream(spec, startup_timeout_s=600, log=log)
            wait_for(lambda: consumed_records(spec.checkpoint) == 120, timeout=300, what="the first 120 records")
            good = create_snapshot(spec.checkpoint, store, spec.name).manifest.snapshot_id
            produce_bad(stack.kafka_bootstrap, topic, POISONED)
            second = first.next_round(60)
            produce(stack.kafka_bootstrap, topic, second)
            wait_for(lambda: consumed_records(spec.checkpoint) == 182, timeout=300, what="the bad records and 60 more")
            poisoned = PoisonedStream(spec, topic, store, suite, good, sorted(expected_aggregates([first])),
                                      [first, second], records=182)
            assert {a for a, v in poisoned.state().items() if v["max"] == BAD_CENTS} == set(POISONED)
            yield poisoned
        finally:
            launcher.stop(spec.checkpoint, timeout_s=30)


def assert_put_back(stream: PoisonedStream, run: DagResult, state: dict[str, Any], launch_id: str | None) -> None:
    """What every run that changed nothing leaves: the run's clone deleted (checkpoint,
    snapshots, record), the stream running (`launch_id`: the same driver, never stopped) and
    every account's state as it was (`state`)."""
    plan = run.tasks["plan"].xcom
    assert run.tasks["tear_down"].state == "success" and run.tasks["tear_down"].xcom["clones_expired"] == 1
    assert not Path(plan["clone_checkpoint"]).exists()
    assert stream.store.list_snapshot_ids(plan["clone_name"]) == []
    assert [c.clone for c in list_clones(stream.store, stream.spec.name)] == []
    if launch_id is not None:
        assert stream.launch_id() == launch_id
    assert stream.state() == state


def test_a_clone_that_still_fails_the_suite_ends_the_run_before_anyone_is_asked_with_production_untouched(
        stream: PoisonedStream, run_dag: Any) -> None:
    before, launch = stream.state(), stream.launch_id()
    narrow = f"max > 100000 and key.account == {POISONED[0]}"  # the other poisoned account left as it is
    run = run_dag("streamstate_repair", stream.conf(where=narrow, spark_check=False))
    assert run.state == "failed", run.log[-5000:]
    assert run.tasks["plan"].xcom["keys"] == 1 and run.tasks["repair_clone"].state == "success"
    assert run.tasks["repair_clone"].xcom["spark"] is None  # not asked
    checked = run.tasks["validate_clone"]
    assert checked.state == "failed" and checked.xcom["success"] is False
    assert {t: run.tasks[t].state for t in ("approve", *AFTER_APPROVAL, "repaired")} == dict.fromkeys(
        ("approve", *AFTER_APPROVAL, "repaired"), "upstream_failed")
    # rollback runs (the tasks it watches are upstream_failed) and finds the stream never stopped.
    assert run.tasks["rollback"].xcom == {"restored": None, "started": False}
    assert_put_back(stream, run, before, launch)


def test_an_approval_nobody_answers_times_out_and_ends_the_run_with_nothing_changed(
        stream: PoisonedStream, run_dag: Any) -> None:
    before, launch = stream.state(), stream.launch_id()
    nobody = NoAnswer("streamstate_repair", "approve")
    run = run_dag("streamstate_repair", stream.conf(approval_hours=0.001, spark_check=False))  # 4 s
    asked = nobody.asked()
    assert run.state == "failed", run.log[-5000:]
    assert asked["subject"] == f"Repair 2 key(s) of stream {stream.spec.name}?"
    assert run.tasks["validate_clone"].xcom["success"] is True
    assert run.tasks["approve"].state == "failed" and "HITLTimeoutError" in run.log
    assert {t: run.tasks[t].state for t in (*AFTER_APPROVAL, "repaired")} == dict.fromkeys(
        (*AFTER_APPROVAL, "repaired"), "upstream_failed")
    assert run.tasks["rollback"].xcom == {"restored": None, "started": False}
    assert_put_back(stream, run, before, launch)


def test_a_rejected_repair_changes_nothing(stream: PoisonedStream, run_dag: Any) -> None:
    before, launch = stream.state(), stream.launch_id()
    person = Person("streamstate_repair", "approve", "Reject")
    run = run_dag("streamstate_repair", stream.conf(spark_check=False))
    asked = person.asked()
    assert run.state == "success", run.log[-5000:]
    assert run.tasks["approve"].state == "success" and run.tasks["stop"].state == "skipped"
    assert run.tasks["rollback"].state == run.tasks["repaired"].state == "skipped"
    # What the person read: each key, its value now (the bad max) and after.
    assert asked["subject"] == f"Repair 2 key(s) of stream {stream.spec.name}?"
    for account in POISONED:
        assert f'| {{"account": "{account}"}} |' in asked["body"] and f'"max": {BAD_CENTS}' in asked["body"]
    assert_put_back(stream, run, before, launch)


def test_a_key_gone_bad_while_a_person_decided_fails_the_repaired_state_and_the_rollback_puts_the_stream_back(
        stream: PoisonedStream, stack: Any, run_dag: Any) -> None:
    seen: dict[str, Any] = {}

    def late_bad_input(asked: dict[str, Any]) -> None:
        """A third account goes wrong after the plan (which names two), before the approval."""
        produce_bad(stack.kafka_bootstrap, stream.topic, (LATE,))
        wait_for(lambda: consumed_records(stream.spec.checkpoint) == stream.records + 1, timeout=300,
                 what="the late bad record")
        stream.records += 1
        seen["state"] = stream.state()

    person = Person("streamstate_repair", "approve", "Approve", meanwhile=late_bad_input)
    run = run_dag("streamstate_repair", stream.conf(spark_check=False))
    person.asked()
    assert run.state == "failed", run.log[-5000:]
    before = seen["state"]
    assert before[LATE]["max"] == BAD_CENTS
    assert run.tasks["plan"].xcom["keys"] == 2 and run.tasks["stop"].xcom["outcome"] != "not-running"
    done = run.tasks["repair"].xcom
    assert run.tasks["repair"].state == "success" and done["in_place"] and done["spark"] is None
    checked = run.tasks["validate_repaired"]
    assert checked.state == "failed" and checked.xcom["success"] is False
    assert run.tasks["resume"].state == run.tasks["repaired"].state == "upstream_failed"
    # The pinned pre-repair snapshot restored and the stream started again; it stays pinned.
    rolled = run.tasks["rollback"].xcom
    assert run.tasks["rollback"].state == "success"
    assert (rolled["restored"], rolled["started"], rolled["state"]) == (done["pinned"], True, "running")
    assert done["pinned"] in pinned_ids(stream.store, stream.spec.name)
    # The repaired snapshot stays, on the timeline the restore abandoned: `latest` is the pinned one.
    assert get_snapshot(stream.store, stream.spec.name, done["edited_snapshot"]).labels["edited-from"] == done["pinned"]
    assert resolve_snapshot(stream.store, stream.spec.name, "latest").snapshot_id == done["pinned"]
    assert consumed_records(stream.spec.checkpoint) == stream.records
    assert_put_back(stream, run, before, None)
    assert stream.launch_id() == rolled["launch_id"]


def test_an_approved_repair_is_made_on_a_clone_then_in_place_and_the_stream_goes_on_exactly(
        stream: PoisonedStream, stack: Any, run_dag: Any) -> None:
    before = stream.state()
    bad = sorted(a for a, v in before.items() if v["max"] == BAD_CENTS)  # with LATE when the rollback's test ran
    spec, store = stream.spec, stream.store
    person = Person("streamstate_repair", "approve", "Approve")
    repaired = run_dag("streamstate_repair", stream.conf())
    person.asked()
    assert repaired.state == "success", repaired.log[-5000:]
    plan = repaired.tasks["plan"].xcom
    assert (plan["keys"], plan["last_good"]) == (len(bad), stream.good)
    assert repaired.tasks["bisect"].xcom["last_good"] == stream.good
    clone = repaired.tasks["repair_clone"].xcom
    assert not clone["in_place"] and clone["spark"]["keys_checked"] == len(bad)
    assert repaired.tasks["validate_clone"].xcom["success"] is True
    done = repaired.tasks["repair"].xcom
    assert done["in_place"] and done["pinned"] == done["source_snapshot"]
    assert done["spark"]["keys_checked"] == len(bad) and repaired.tasks["validate_repaired"].xcom["success"] is True
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
    rounds = stream.rounds
    rounds.append(rounds[-1].next_round(60))
    produce(stack.kafka_bootstrap, stream.topic, rounds[-1])
    wait_for(lambda: consumed_records(spec.checkpoint) == stream.records + 60, timeout=300,
             what="60 records after the repair")
    assert launcher.stop(spec.checkpoint, timeout_s=120).outcome == "stopped"
    everyone = expected_aggregates(rounds)
    after = expected_aggregates(rounds[2:])
    good = expected_aggregates(rounds[:1])
    repaired_keys = combined({a: v for a, v in good.items() if a in bad}, {a: v for a, v in after.items() if a in bad})
    assert aggregates(spec.checkpoint, everyone) == {**everyone, **repaired_keys}
