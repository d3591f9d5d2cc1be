"""A stream spec is described once and carried everywhere: it validates what it is given,
round-trips through JSON (XCom, Params), and a clone's arguments follow its own checkpoint
and sinks."""

from __future__ import annotations

import json

import pytest

from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.spec import StreamSpec


def orders(**over) -> StreamSpec:  # noqa: ANN003
    base = dict(
        name="orders", checkpoint="/data/ckpt/orders", store="s3://snaps/prod", application="/jobs/orders.py",
        application_args=["--checkpoint", "{checkpoint}", "--alerts-topic", "{sinks[alerts]}", "--literal", "{{x}}"],
        sinks={"alerts": "orders-alerts"}, kafka_conn_id="kafka_prod", storage_conn_id="aws_snaps",
    )
    return StreamSpec(**{**base, **over})


def test_a_spec_round_trips_through_json() -> None:
    spec = orders()
    assert StreamSpec.from_value(json.dumps(spec.to_dict())) == spec
    assert StreamSpec.from_value(spec.to_dict()) == spec


def test_arguments_follow_the_specs_own_checkpoint_and_sinks() -> None:
    spec = orders()
    assert spec.resolved_args() == ["--checkpoint", "/data/ckpt/orders", "--alerts-topic", "orders-alerts", "--literal", "{x}"]
    clone = spec.derive(name="orders-clone", checkpoint="/tmp/clone", sinks={"alerts": "clone-alerts"})
    assert clone.resolved_args()[:4] == ["--checkpoint", "/tmp/clone", "--alerts-topic", "clone-alerts"]


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ({"name": "orders"}, "invalid stream spec"),
        ({"name": "../x", "checkpoint": "/c", "store": "/s"}, "invalid stream name"),
        ({"name": "o", "checkpoint": "/c", "store": "/s", "colour": "red"}, "unknown stream spec field"),
        ({"name": "o", "checkpoint": "/c", "store": "/s", "application_args": ["{secret}"]}, "names {secret}"),
        ({"name": "o", "checkpoint": "/c", "store": "/s", "sinks": {"a": 1}}, "sinks must map"),
        ({"name": "o", "checkpoint": "", "store": "/s"}, "checkpoint is required"),
        ("not json", "must be JSON"),
        (7, "must be a StreamSpec or a dict"),
    ],
)
def test_bad_specs_are_refused_in_one_line(value, words) -> None:
    with pytest.raises(UsageError, match=words):
        StreamSpec.from_value(value)


def test_an_argument_naming_a_sink_the_spec_lacks_is_refused_when_resolved() -> None:
    with pytest.raises(UsageError, match="cannot be filled in") as err:
        orders(sinks={}).resolved_args()
    assert "sinks are none" in err.value.one_line()
