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
