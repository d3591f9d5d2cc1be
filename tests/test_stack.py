"""Pure parts of the local stack."""

from __future__ import annotations

from dev.stack import kraft_cluster_id


def test_kraft_cluster_ids_never_look_like_an_option() -> None:
    ids = {kraft_cluster_id() for _ in range(5000)}
    assert len(ids) == 5000
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)
