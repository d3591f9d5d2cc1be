"""Names that changed, and the old ones still read.

A stream's connection was `aws_conn_id` when S3 was the only remote backend; HDFS and
registered backends take one too, so it is `storage_conn_id` now. Specs, pipeline and store
entries, DAG run confs, XCom values and serialized triggers written before the rename carry
the old names: they are read under the new ones (data, read silently); code that passes an
old name as an argument gets a deprecation warning. Pure Python.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from airflow_provider_streamstate.engine.core.errors import UsageError

RENAMED: dict[str, str] = {
    "aws_conn_id": "storage_conn_id",
    "source_aws_conn_id": "source_storage_conn_id",
    "destination_aws_conn_id": "destination_storage_conn_id",
    "dr_aws_conn_id": "dr_storage_conn_id",
}
OLD_NAME: dict[str, str] = {new: old for old, new in RENAMED.items()}


def _given(value: Any) -> bool:
    return value not in (None, "")


def _merged(new: str, current: Any, old: str, old_value: Any, *, what: str) -> Any:
    """The value of `new` when it and its old name may both be given: refused if they differ."""
    if _given(current) and _given(old_value) and current != old_value:
        raise UsageError(f"{what}: {new}={current!r} and its old name {old}={old_value!r} disagree",
                         hint=f"give {new} only")
    return current if _given(current) else old_value


def with_current_names(value: Mapping[str, Any], *, what: str) -> dict[str, Any]:
    """`value` (a dict written by a DAG file, a Variable, a run conf or XCom) with each old key
    under its current name; both names with different values are refused in one line."""
    out = dict(value)
    for old, new in RENAMED.items():
        if old in out:
            old_value = out.pop(old)
            out[new] = _merged(new, out.get(new), old, old_value, what=what)
    return out


def renamed_value(new: str, current: Any, old_value: Any, *, owner: str,
                  category: type[Warning] = DeprecationWarning, stacklevel: int = 3) -> Any:
    """The value of argument `new` of `owner`: `current`, or what the caller gave under the old
    name (with a deprecation warning; both, different, are refused)."""
    if old_value is None:
        return current
    old = OLD_NAME[new]
    warnings.warn(f"{owner}: {old} is renamed {new}; pass {new}", category, stacklevel=stacklevel)
    return _merged(new, current, old, old_value, what=owner)


def renamed_argument(kwargs: dict[str, Any], new: str, current: Any, *, owner: str,
                     category: type[Warning] = DeprecationWarning) -> Any:
    """`renamed_value` for an old name passed in `kwargs` (popped from it)."""
    old = OLD_NAME[new]
    if old not in kwargs:
        return current
    return renamed_value(new, current, kwargs.pop(old), owner=owner, category=category, stacklevel=4)
