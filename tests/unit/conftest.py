"""Fixtures of the unit tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.unit.fake_yarn import serve_fake_rm


@pytest.fixture
def fake_rm() -> Iterator[str]:
    """A stand-in YARN ResourceManager (tests/unit/fake_yarn.py): its base URL."""
    yield from serve_fake_rm()
