"""The history page of a long stream is the same HTML whether its picture was drawn whole or
only the snapshots that changed since the last view were drawn again: after a validation, a
pin, a clone, a replica or a new snapshot, the page the server keeps drawing equals the page
drawn from nothing."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.catalog.retention import pin_snapshot
from airflow_provider_streamstate.engine.lifecycle.replicate import replicate
from airflow_provider_streamstate.engine.overview.history import history_of, read_catalog, stream_history
from airflow_provider_streamstate.engine.streams.clones import record_clone
from airflow_provider_streamstate.plugins import pages
from tests.unit.store_history import at, put_snapshot, put_validation

URLS = pages.Urls("/streamstate", "")


def fresh_page(store: LocalStore, dr: LocalStore, page_no: int = 1) -> str:
    """The page drawn from nothing kept: the catalog read, the history and its picture whole."""
    history = history_of(read_catalog(store, "s", dr_store=dr))
    html = pages.history_page(URLS, history, None, None, page_no)
    return html.replace(pages.drawn_svg(URLS, history, None), pages.time_svg(URLS, history, None))


def test_a_long_history_drawn_again_in_part_is_the_page_drawn_whole(tmp_path: Path) -> None:
    store, dr = LocalStore(tmp_path / "store", fsync=False), LocalStore(tmp_path / "dr", fsync=False)
    start = at("2026-11-20T12:00")
    ids = [put_snapshot(store, "s", b, start + timedelta(minutes=b)).snapshot_id for b in range(1, pages.DOTS_MAX + 12)]
    for sid in ids[::10]:
        put_validation(store, "s", sid, "shape", True)
    replicate(store, dr, "s", snapshots=ids[:50])

    def viewed() -> str:
        return pages.history_page(URLS, stream_history(store, "s", dr_store=dr), None, None)
    first = viewed()
    assert "class=by-time" in first and first == fresh_page(store, dr)
    changes = [
        lambda: put_validation(store, "s", ids[7], "shape", False),
        lambda: put_validation(store, "s", ids[20], "other", True),
        lambda: pin_snapshot(store, "s", ids[33], reason="keep"),
        lambda: record_clone(store, clone="s-copy", source_stream="s", checkpoint=str(tmp_path / "copy"),
                             snapshot_id=ids[40], expires_at="2099-01-01T00:00:00Z", sinks={}),
        lambda: replicate(store, dr, "s", snapshots=ids[50:60]),
        lambda: put_snapshot(store, "s", 500, start + timedelta(days=1)),  # the time axis grows: drawn whole
        lambda: put_validation(store, "s", ids[-2], "shape", False),
    ]
    for i, change in enumerate(changes):
        before = viewed()
        change()
        after = viewed()
        assert (i, after != before) == (i, True)
        assert after == fresh_page(store, dr)
