"""The components beyond the stack that a test may start (a cluster, a second S3, a region
pair), each with the marker (pyproject.toml) its tests carry: a test module's cost shows in its
marks, `-m "not yarn"` (say) leaves those tests out, and tests/conftest.py fails a test that
uses one unmarked.

Tests import helpers from here, never from conftest.py (see tests/s3.py)."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

# Each collected test file's markers, before any deselection (-k, -m), stashed by
# tests/conftest.py: a test about the whole suite reads them instead of collecting it again in
# another process (tests/test_testing_doc.py). Here, not in the conftest: pytest imports that
# as `conftest`, and a second import as `tests.conftest` would make a second key.
COLLECTED_MARKERS = pytest.StashKey[dict[str, set[str]]]()

# fixture -> the marker of the tests that use it
COMPONENT_MARKERS = {
    "yarn": "yarn", "hdfs": "hdfs", "spark_standalone": "spark_standalone", "s3proxy": "s3proxy",
    "regions": "dr_regions", "private_regions": "dr_regions",
}


def marker_of_part(part: str) -> str | None:
    """The marker of the tests that use a shared part (tests/shared_parts.py), by the part's
    name; None for the stack, which every test may use."""
    fixture = "regions" if part.startswith("regions-") else part.replace("-", "_")  # a pair per policy
    return COMPONENT_MARKERS.get(fixture)


def last_users(files: list[tuple[str, set[str]]]) -> dict[str, int]:
    """For each component marker, the position of the last of `files` (in run order, each
    with the markers of its tests) that carries it."""
    last: dict[str, int] = {}
    for position, (_, markers) in enumerate(files):
        for marker in markers & set(COMPONENT_MARKERS.values()):
            last[marker] = position
    return last


def unmarked_components(items: Iterable[pytest.Item]) -> list[tuple[pytest.Item, str]]:
    """(test, marker) for each test that uses a component's fixture without its marker."""
    return [(item, marker) for item in items for fixture, marker in COMPONENT_MARKERS.items()
            if fixture in getattr(item, "fixturenames", ()) and item.get_closest_marker(marker) is None]


def require_marker(request: pytest.FixtureRequest, marker: str) -> None:
    """Fail a test that starts the component of `marker` on demand (make_store) without its marker."""
    if request.node.get_closest_marker(marker) is None:
        pytest.fail(f"{request.node.nodeid} starts the {marker} component: mark it `pytest.mark.{marker}` "
                    "(see tests/components.py)")
