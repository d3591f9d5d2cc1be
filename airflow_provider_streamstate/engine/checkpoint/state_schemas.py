"""Which state schema file describes a store at a batch.

A single-store operator keeps its store's schema (versions 1 and 2) in partition 0's
`_metadata/schema`, and Spark reads only that file. A migration (engine/edit/migrate.py)
replaces it at its edit batch B and keeps the one it replaced beside it as
`schema.before-B`: the batches before B were written in that schema, so the engine's readers
pick the file per batch, and what cannot pick (Spark, a cut of an older batch) is refused."""

from __future__ import annotations

from collections.abc import Iterable

BEFORE_MIGRATION = ".before-"


def schema_file(operator_id: int, store: str) -> str:
    """Where a single-store operator keeps the schema file (versions 1 and 2) of `store`."""
    return f"state/{operator_id}/0/_metadata/schema" if store == "default" else \
        f"state/{operator_id}/0/{store}/_metadata/schema"


def schema_before(rel: str, batch_id: int) -> str:
    """Where a migration at batch `batch_id` keeps the schema file `rel` it replaced."""
    return f"{rel}{BEFORE_MIGRATION}{batch_id}"


def migrations_of(rel: str, paths: Iterable[str]) -> list[int]:
    """The batches at which migrations replaced the schema file `rel`, oldest first, from the
    paths of the files beside it."""
    prefix = rel + BEFORE_MIGRATION
    return sorted(int(p[len(prefix):]) for p in paths if p.startswith(prefix) and p[len(prefix):].isdigit())


def schema_of_batch(rel: str, paths: Iterable[str], batch_id: int) -> str:
    """The schema file that describes batch `batch_id` of a store whose current schema file is
    `rel`: the one kept by the first migration after that batch, else `rel`."""
    for migrated_at in migrations_of(rel, paths):
        if batch_id < migrated_at:
            return schema_before(rel, migrated_at)
    return rel


def migration_after(paths: Iterable[str], batch_id: int) -> tuple[int, str] | None:
    """The first migration after batch `batch_id` that kept a schema file among `paths` (a
    cut's, or a schema folder's), with that file: batch `batch_id`'s state is in a schema its
    store's `schema` file no longer says. None when no migration came after it."""
    found = []
    for p in paths:
        head, sep, tail = p.rpartition(BEFORE_MIGRATION)
        if sep and head.endswith("/_metadata/schema") and tail.isdigit() and batch_id < int(tail):
            found.append((int(tail), p))
    return min(found, default=None)
