"""docs/reference.md is what dev/gen_reference.py writes from the code as it is now, and the
docstrings it is written from are complete: every `__init__` argument of every operator,
sensor, trigger and hook that provider info lists has a `:param` line, no `:param` names an
argument that does not exist, and `(templated)` agrees with `template_fields`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    from dev import gen_reference  # the repo root is on sys.path (conftest)

    return gen_reference


@pytest.fixture(scope="module")
def classes(gen: ModuleType) -> list[Any]:
    return gen.collect()


def test_reference_md_is_what_the_generator_writes_from_the_code(gen: ModuleType, classes: list[Any]) -> None:
    expected = gen.render(classes)
    actual = (REPO / "docs" / "reference.md").read_text()
    assert actual == expected, "docs/reference.md is stale: run `.venv/bin/python dev/gen_reference.py`"


def test_every_init_argument_of_every_provider_class_has_a_param_line(gen: ModuleType, classes: list[Any]) -> None:
    missing = [p for p in gen.problems(classes) if "has no :param line" in p]
    assert missing == [], "\n".join(missing)


def test_param_lines_name_real_arguments_and_say_templated_as_template_fields_does(
    gen: ModuleType, classes: list[Any]
) -> None:
    wrong = [p for p in gen.problems(classes) if "has no :param line" not in p]
    assert wrong == [], "\n".join(wrong)


def test_the_reference_covers_every_operator_sensor_trigger_and_hook_module_of_provider_info(
    classes: list[Any],
) -> None:
    from airflow_provider_streamstate.get_provider_info import get_provider_info

    info = get_provider_info()
    listed = {m for kind in ("operators", "sensors", "hooks") for e in info[kind] for m in e["python-modules"]}
    documented = {c.module for c in classes}
    # Every operator, sensor and hook module defines at least one public class (triggers.base
    # holds only the shared polling loop; operators.base the bases every operator extends,
    # whose arguments each operator's table shows).
    assert listed - {"airflow_provider_streamstate.operators.base"} <= documented, sorted(listed - documented)
    assert {c.kind for c in classes} == {"operators", "sensors", "triggers", "hooks"}


def test_an_undocumented_argument_and_a_wrong_templated_mark_are_reported(gen: ModuleType) -> None:
    from airflow.sdk import BaseOperator

    class Example(BaseOperator):
        """Example.

        :param documented: a value. (templated)
        :param gone: an argument that no longer exists.
        """

        template_fields: Sequence[str] = ("undocumented",)

        def __init__(self, *, documented: int = 1, undocumented: str = "x", **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.documented = documented
            self.undocumented = undocumented

    found = gen.problems([gen.describe(Example, "operators")])
    assert sorted(found) == sorted([
        f"{__name__}.Example: __init__ argument 'undocumented' (of Example) has no :param line",
        f"{__name__}.Example: :param gone names no __init__ argument",
        f"{__name__}.Example: :param documented says (templated) but it is not in template_fields",
    ])
