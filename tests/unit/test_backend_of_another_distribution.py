"""A backend of another distribution (tests/backend_dist, installed into the virtualenv by
`make setup`) is found through the `streamstate.backends` entry point alone, and used: the
CLI snapshots a checkpoint into its `flat://` store and restores the snapshot from it, byte
for byte, with nothing in this package naming it."""

from __future__ import annotations

import json
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from airflow_provider_streamstate.cli import main
from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.engine.stores import open_store
from airflow_provider_streamstate.engine.stores.backends import GROUP, backend_for, registered_schemes
from tests.unit.test_checkpoint_fs import hdfs_checkpoint

REPO = Path(__file__).resolve().parents[2]


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_flat_backend_is_registered_by_its_own_distribution_and_named_nowhere_in_this_package() -> None:
    (ep,) = [ep for ep in entry_points(group=GROUP) if ep.name == "flat"]
    assert ep.dist is not None and ep.dist.name == "streamstate-flat-backend"
    assert "flat" in registered_schemes()
    backend = backend_for("flat")
    assert backend is not None and backend.store_schemes == ("flat",) and backend.open_checkpoint is None
    package = REPO / "airflow_provider_streamstate"
    assert not [p for p in package.rglob("*.py") if "streamstate_flat_backend" in p.read_text()]


def test_a_snapshot_is_taken_into_and_restored_from_a_store_of_another_distribution(tmp_path, capsys) -> None:
    checkpoint = hdfs_checkpoint(tmp_path / "ckpt")
    store_url = f"flat://{tmp_path / 'flat-store'}"

    assert main(["snapshot", "create", "--checkpoint", str(checkpoint), "--store", store_url, "--stream", "orders",
                 "--json"]) == 0
    created = json.loads(capsys.readouterr().out)
    store = open_store(store_url)
    assert type(store).__module__ == "streamstate_flat_backend.store"
    assert store.list_snapshot_ids("orders") == [created["snapshot_id"]]
    # One flat directory: every object a file named by its key, no subdirectories.
    assert all(p.is_file() for p in (tmp_path / "flat-store").iterdir())

    target = tmp_path / "restored"
    assert main(["restore", "latest", "--store", store_url, "--stream", "orders", "--target", str(target),
                 "--json"]) == 0
    restored = json.loads(capsys.readouterr().out)
    assert restored["snapshot_id"] == created["snapshot_id"]
    copied = {rel: data for rel, data in _files(target).items() if not rel.startswith("_streamstate/")}
    original = _files(checkpoint)
    assert copied and {rel: original[rel] for rel in copied} == copied
    assert "metadata" in copied and any(rel.startswith("state/0/0/") for rel in copied)


def test_a_scheme_no_installed_distribution_registers_is_refused_with_the_ones_that_are(tmp_path) -> None:
    with pytest.raises(UsageError, match="unsupported store 'nowhere://x'") as refused:
        open_store("nowhere://x")
    assert "flat:///abs/path" in (refused.value.hint or "") and "hdfs://namenode:8020/path" in (refused.value.hint or "")
    with pytest.raises(UsageError, match="does not apply to"):
        open_store(f"flat://{tmp_path}", conn_id="aws_default")
