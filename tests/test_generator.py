"""The generator is deterministic and its expected aggregates are exact."""

from __future__ import annotations

from airflow_provider_streamstate.jobs.generator import (
    GeneratorSpec,
    expected_aggregates,
    messages,
    transactions,
)


def test_same_seed_same_transactions_whatever_the_chunking() -> None:
    whole = list(transactions(GeneratorSpec(seed=3, events=100)))
    first = GeneratorSpec(seed=3, events=40)
    chunked = list(transactions(first)) + list(transactions(first.next_round(60)))
    assert whole == chunked
    assert list(transactions(GeneratorSpec(seed=4, events=100))) != whole


def test_duplicates_are_sent_but_not_counted() -> None:
    spec = GeneratorSpec(seed=1, events=500, duplicate_rate=0.2)
    sent = list(messages(spec))
    assert 500 < len(sent) < 700
    agg = expected_aggregates([spec])
    assert sum(a["count"] for a in agg.values()) == 500
    by_hand: dict[str, int] = {}
    for t in transactions(spec):
        by_hand[t.account] = by_hand.get(t.account, 0) + t.amount_cents
    assert {k: v["sum"] for k, v in agg.items()} == by_hand
    assert all(v["max"] <= v["sum"] for v in agg.values())
