"""Fixtures of the integration tests that need more than the shared stack."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dev import stack as stack_mod


@pytest.fixture
def regions(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[
        tuple[stack_mod.Stack, stack_mod.DrKafka]]:
    """A private primary (Kafka, S3) and a DR cluster fed by MM2 with the given policy."""
    state_dir = tmp_path_factory.mktemp("regions")
    try:
        primary = stack_mod.up(state_dir)
        dr = stack_mod.start_dr_kafka(state_dir, primary.kafka_bootstrap, policy=request.param)
        yield primary, dr
    finally:
        stack_mod.down(state_dir)


@pytest.fixture(scope="session")
def yarn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[stack_mod.YarnCluster]:
    """The stack's YARN cluster, shared by the test files that need one: the scheduler in
    tests/conftest.py runs them in one worker, one after the other (two minicluster on two
    cores at once made each take three times as long)."""
    state_dir = tmp_path_factory.mktemp("yarn")
    try:
        yield stack_mod.start_yarn_cluster(state_dir)
    finally:
        stack_mod.stop_yarn_cluster(state_dir)


@pytest.fixture(scope="session")
def hdfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[stack_mod.HdfsCluster]:
    """The stack's HDFS (a NameNode and a DataNode in one JVM, WebHDFS on), started once per
    session for the tests that ask for it (about 5 s, ~250 MB), without YARN or the rest of
    the stack; stopped, its data deleted with the session's temporary directory."""
    state_dir = tmp_path_factory.mktemp("hdfs")
    try:
        yield stack_mod.start_hdfs(state_dir)
    finally:
        stack_mod.stop_hdfs(state_dir)
