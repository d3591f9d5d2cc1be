"""Backends: the kinds of snapshot store and checkpoint filesystem, each one package found
by its URL scheme through the `streamstate.backends` entry point group, as fsspec finds its
protocols. The engine names no kind of storage: it asks this registry for the backend of a
scheme and uses what that returns (a `SnapshotStore`, a `CheckpointFS`).

A distribution adds a backend by declaring, in its own pyproject,

    [project.entry-points."streamstate.backends"]
    myfs = "my_package.streamstate_backend:BACKEND"

where `BACKEND` is a `Backend` (docs/backends.md says what each part must guarantee). The
Airflow side of a backend (how an Airflow connection becomes its `connection`) is found the
same way in the `streamstate.airflow_connections` group, by the Airflow layer alone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from airflow_provider_streamstate.engine.core.errors import UsageError

GROUP = "streamstate.backends"


@dataclass(frozen=True)
class Backend:
    """One kind of storage. `open_store(url, StoreOptions)` opens a snapshot store of a URL of
    one of `store_schemes`; `open_checkpoint(location, connection, conn_id)` the checkpoint
    filesystem of a location of one of `checkpoint_schemes` (`connection` as the caller gives
    it, None: the environment's). `reach(connection)` describes a connection so that another
    process can open it again (something picklable with a `connection()` method), None when
    the backend's connections cannot be handed over; `reach_from_spark_conf(get, location)`
    the same from a Spark application's conf. `store_example` and `checkpoint_example` show
    a URL in error hints."""

    name: str
    store_schemes: tuple[str, ...] = ()
    checkpoint_schemes: tuple[str, ...] = ()
    open_store: Callable[..., Any] | None = field(default=None, repr=False)
    open_checkpoint: Callable[..., Any] | None = field(default=None, repr=False)
    reach: Callable[[Any], Any] | None = field(default=None, repr=False)
    reach_from_spark_conf: Callable[[Callable[[str], str | None], str], Any] | None = field(default=None, repr=False)
    store_example: str = ""
    checkpoint_example: str = ""


_lock = threading.Lock()
_loaded: dict[str, Backend | None] = {}


def _entry_points() -> dict[str, Any]:
    return {ep.name.lower(): ep for ep in entry_points(group=GROUP)}


def backend_for(scheme: str) -> Backend | None:
    """The backend registered for `scheme` (lower case), loaded once; None when none is."""
    scheme = scheme.lower()
    with _lock:
        if scheme in _loaded:
            return _loaded[scheme]
    ep = _entry_points().get(scheme)
    found = None if ep is None else ep.load()
    if ep is not None and not isinstance(found, Backend):
        raise UsageError(f"the {GROUP} entry point {scheme!r} ({ep.value}) is a {type(found).__name__}, "
                         "not a Backend", hint="fix the distribution that declares it")
    with _lock:
        _loaded[scheme] = found
    return found


def registered_schemes() -> list[str]:
    """Every scheme some installed distribution registers, sorted."""
    return sorted(_entry_points())


def examples(kind: str) -> str:
    """The example URLs of every registered backend of `kind` ("store" or "checkpoint"), for hints."""
    out: list[str] = []
    for scheme in registered_schemes():
        backend = backend_for(scheme)
        example = "" if backend is None else getattr(backend, f"{kind}_example")
        if example and example not in out and scheme in getattr(backend, f"{kind}_schemes"):
            out.append(example)
    return ", ".join(out)
