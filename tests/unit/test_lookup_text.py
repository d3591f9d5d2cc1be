"""Keys and conditions typed as text (a CLI's --key, a URL's ?key=, a DAG's templated field)
read as the state key's types, and refused in one line when they cannot be."""

from __future__ import annotations

import datetime as dt
import decimal
from types import SimpleNamespace

import pytest

from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.engine.lookup.api import key_values
from airflow_provider_streamstate.engine.lookup.encodings.keytext import parse_key_text
from airflow_provider_streamstate.engine.lookup.encodings.types import parse_struct
from airflow_provider_streamstate.engine.lookup.encodings.unsafe_row import encode_row
from airflow_provider_streamstate.engine.lookup.predicate import parse_predicate
from tests.lookup_cases import TYPED_SCHEMA


def schema(**cols: object) -> object:
    return parse_struct({"type": "struct", "fields": [{"name": n, "type": t, "nullable": True, "metadata": {}}
                                                      for n, t in cols.items()]}, "test")


@pytest.mark.parametrize(("text", "parsed"), [
    ("account=a-17", {"account": "a-17"}),
    ("account=a-17,region=eu", {"account": "a-17", "region": "eu"}),
    ("a-17", ["a-17"]),
    ("a-17, eu", ["a-17", "eu"]),
    ('w={"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T00:10:00Z"},k=5',
     {"w": '{"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T00:10:00Z"}', "k": "5"}),
    ('b="base64:YQ=="', {"b": "base64:YQ=="}),
    ('"x=y"', ["x=y"]),
    ('{"k": null, "s": "x"}', {"k": None, "s": "x"}),
    ("[1, 2]", [1, 2]),
])
def test_a_key_is_read_from_text_as_pairs_bare_values_or_json(text: str, parsed: object) -> None:
    assert parse_key_text(text) == parsed


@pytest.mark.parametrize(("text", "words"), [
    ("", "empty"), ("a=1,2", "mixes"), ("a=1,a=2", "twice"), ("{bad", "not valid JSON"),
])
def test_a_key_that_cannot_be_read_is_refused_in_one_line(text: str, words: str) -> None:
    with pytest.raises(UsageError, match=words) as err:
        parse_key_text(text)
    assert "\n" not in err.value.one_line()


def test_text_values_take_the_key_columns_types() -> None:
    s = schema(i="integer", l="long", d="double", dc="decimal(10,2)", b="boolean", day="date", ts="timestamp",
               bin="binary", w={"type": "struct", "fields": [
                   {"name": "start", "type": "timestamp", "nullable": True, "metadata": {}},
                   {"name": "end", "type": "timestamp", "nullable": True, "metadata": {}}]})
    text = ('i=-3,l=9007199254740993,d=NaN,dc=12.50,b=true,day=2024-02-29,ts=2026-01-01T12:00:00,bin=hex:00ff,'
            'w={"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T00:10:00+00:00"}')
    vals = key_values(parse_key_text(text), s)
    utc = dt.UTC
    assert vals[:3] == [-3, 9007199254740993, vals[2]] and vals[2] != vals[2]
    assert vals[3:8] == [decimal.Decimal("12.50"), True, dt.date(2024, 2, 29), dt.datetime(2026, 1, 1, 12),
                         b"\x00\xff"]
    assert vals[8] == {"start": dt.datetime(2026, 1, 1, tzinfo=utc), "end": dt.datetime(2026, 1, 1, 0, 10, tzinfo=utc)}
    assert encode_row(vals, s) == encode_row([-3, 9007199254740993, float("nan"), decimal.Decimal("12.5"), True,
                                              dt.date(2024, 2, 29), dt.datetime(2026, 1, 1, 12, tzinfo=utc), b"\x00\xff",
                                              [dt.datetime(2026, 1, 1, tzinfo=utc),
                                               dt.datetime(2026, 1, 1, 0, 10, tzinfo=utc)]], s)


def test_every_type_a_key_can_hold_reads_back_from_its_json_form() -> None:
    """What `KeyLookup.to_json` prints for a key, given back as --key, is the same key."""
    import json

    from airflow_provider_streamstate.engine.lookup.encodings.values import to_jsonable
    from tests.lookup_cases import typed_rows

    fields = [f for f in TYPED_SCHEMA.fields if f.name not in ("bin", "m", "tsn")]  # see the binary note below
    s = TYPED_SCHEMA.__class__("struct", tuple(fields))
    for row in typed_rows(20):
        values = [v for v, f in zip(row, TYPED_SCHEMA.fields, strict=True) if f in fields]
        as_text = json.dumps(to_jsonable(dict(zip([f.name for f in fields], values, strict=True))))
        assert encode_row(key_values(parse_key_text(as_text), s), s) == encode_row(values, s)


@pytest.mark.parametrize(("text", "words"), [
    ("i=x,day=2024-01-01,ts=2024-01-01", "'x' does not read as integer"), ("i=1,day=2024-13-01,ts=2024-01-01", "does not read as date"),
    ("i=1,day=2024-01-01,ts=yesterday", "ISO 8601"), ("i=1", "missing: day, ts"),
    ("nope=1,i=1,day=2024-01-01,ts=2024-01-01", "no column 'nope'"),
])
def test_a_value_of_the_wrong_type_is_refused_with_the_columns(text: str, words: str) -> None:
    with pytest.raises(UsageError) as err:
        key_values(parse_key_text(text), schema(i="integer", day="date", ts="timestamp"))
    assert words in err.value.one_line() and "\n" not in err.value.one_line()


def hit(value: object) -> SimpleNamespace:
    return SimpleNamespace(found=value is not None, value=value)


@pytest.mark.parametrize(("condition", "value", "holds"), [
    ("total > 100", {"total": 101}, True),
    ("total > 100", {"total": 100}, False),
    ("total > 100", None, False),
    ("absent", None, True),
    ("present", {"total": 1}, True),
    ("sum == 12.50", {"sum": decimal.Decimal("12.5")}, True),
    ('label != "x" and count >= 2', {"label": "y", "count": 2}, True),
    ("label == eu", {"label": "eu"}, True),
    ("value.c > 3", {"value": {"c": 4}, "ttlExpirationMs": 1}, True),
    ("len() >= 2", [{"x": 1}, {"x": 2}], True),
    ("x == 2", [{"x": 1}, {"x": 2}], True),
    ("end > 2026-01-01T00:00:00Z", {"end": dt.datetime(2026, 1, 2, tzinfo=dt.UTC)}, True),
    ("top == null", {"top": None}, True),
])
def test_a_condition_on_a_keys_value(condition: str, value: object, holds: bool) -> None:
    assert parse_predicate(condition)(hit(value)) is holds


@pytest.mark.parametrize(("condition", "words"), [("", "empty"), ("total >", "cannot read"),
                                                   ("len() > x", "whole number")])
def test_a_condition_that_cannot_be_read_is_refused(condition: str, words: str) -> None:
    with pytest.raises(UsageError, match=words):
        parse_predicate(condition)


def test_a_condition_on_a_field_the_value_lacks_names_the_fields() -> None:
    with pytest.raises(UsageError) as err:
        parse_predicate("totl > 1")(hit({"total": 1, "n": 2}))
    assert err.value.one_line() == "the value has no field 'totl'; its fields there: total, n"
