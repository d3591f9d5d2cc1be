"""Every error the engine raises ends with what to do: a raise site that gives no hint gets
its class's default action, so no line the CLI or a task log prints stops at the problem."""

from __future__ import annotations

import importlib
import pkgutil

import airflow_provider_streamstate.engine as engine
from airflow_provider_streamstate.engine.core.errors import Cancelled, StreamstateError


def _all_subclasses(cls: type) -> set[type]:
    out = set()
    for sub in cls.__subclasses__():
        out |= {sub, *_all_subclasses(sub)}
    return out


def test_every_engine_error_without_a_hint_still_ends_with_an_action() -> None:
    for mod in pkgutil.walk_packages(engine.__path__, engine.__name__ + "."):
        importlib.import_module(mod.name)
    classes = {StreamstateError, *_all_subclasses(StreamstateError)} - {Cancelled}
    assert len(classes) >= 15
    for cls in classes:
        line = cls("something is wrong").one_line()
        assert line.startswith("something is wrong; ") and len(line) > len("something is wrong; ") + 10, cls


def test_a_hint_given_where_the_error_is_raised_wins_over_the_default() -> None:
    from airflow_provider_streamstate.engine.core.errors import NotFoundError

    assert NotFoundError("no such stream x", hint="did you mean y").one_line() == "no such stream x; did you mean y"


def test_a_missing_optional_dependency_is_one_line_naming_its_extra_and_nothing_else_is_hidden() -> None:
    from airflow_provider_streamstate.engine.core.errors import (
        MissingExtraError,
        UsageError,
        missing_extra_of,
    )

    gx = missing_extra_of(ModuleNotFoundError("No module named 'great_expectations'", name="great_expectations"))
    assert isinstance(gx, MissingExtraError) and isinstance(gx, UsageError)
    assert gx.one_line() == (
        "this needs great_expectations, which is not installed (the [gx] extra); pip install "
        "'airflow-provider-streamstate[gx]' where the state job's driver runs (here without a Spark connection)")
    spark = missing_extra_of(ModuleNotFoundError("No module named 'pyspark.sql'", name="pyspark.sql"))
    assert spark is not None and "pip install 'airflow-provider-streamstate[spark]'" in spark.one_line()
    # A core dependency or a module of ours missing is a bug to show, not an extra to install.
    assert missing_extra_of(ModuleNotFoundError("No module named 'boto3'", name="boto3")) is None
    assert missing_extra_of(ImportError("cannot import name 'x' from 'pyspark'", name="pyspark")) is None
    assert missing_extra_of(ValueError("pyspark")) is None
