"""A pipeline failover refuses, before it asks Kafka anything, what could make the DR pipeline
read a record twice or skip one: a DR link topic the mirror still writes (the identity
policy's same name) unless confirmed, two links onto one DR topic, a link not in the
pipeline, targets that are not one per member. The broker given does not exist: a refusal
that needed Kafka would fail on it instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.core.errors import TransientError, UsageError
from airflow_provider_streamstate.engine.dr.failover import TopicMap
from airflow_provider_streamstate.engine.pipeline.failover import failover_pipeline
from tests.unit.test_pipeline_records import _pipeline_snapshot

NOWHERE = "127.0.0.1:9"  # nothing listens: Kafka is never reached by a refusal


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    store = LocalStore(tmp_path / "dr-store")
    _pipeline_snapshot(store, tmp_path, "20260101T000000000001Z")
    return store


@pytest.mark.parametrize(("targets", "link_topics", "policy", "said"), [
    ({"enrich": "e", "totals": "t"}, {}, "identity", "is where the mirror copies the primary's link"),
    ({"enrich": "e", "totals": "t"}, {"nolink": "x"}, "default", "--link-topic names nolink, which is not a link"),
    ({"enrich": "e"}, {}, "default", "gives targets for enrich"),
])
def test_a_failover_that_could_count_twice_or_skip_is_refused_before_kafka(
    store: LocalStore, tmp_path: Path, targets: dict[str, str], link_topics: dict[str, str], policy: str, said: str
) -> None:
    targets = {m: str(tmp_path / t) for m, t in targets.items()}
    with pytest.raises(UsageError, match=said):
        failover_pipeline(store, "orders", targets, NOWHERE, topic_map=TopicMap(policy=policy),
                          link_topics=link_topics, timeout_s=1.0)
    assert not any(Path(t).exists() for t in targets.values())


def test_the_mirrors_own_name_is_accepted_once_confirmed(store: LocalStore, tmp_path: Path) -> None:
    """`--link-topic link=link` says the link topics are no longer mirrored: the failover goes
    on (here to the missing broker, which is its next step)."""
    targets = {m: str(tmp_path / m) for m in ("enrich", "totals")}
    with pytest.raises(TransientError, match="cannot reach the DR Kafka cluster"):
        failover_pipeline(store, "orders", targets, NOWHERE, topic_map=TopicMap(policy="identity"),
                          link_topics={"link": "link"}, timeout_s=1.0)
