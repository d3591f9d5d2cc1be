"""Values people write by hand (in a DAG, a Param, a template, a flag): durations and yes/no,
parsed in one place so that every face accepts the same spellings and refuses the same
mistakes in one line."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from airflow_provider_streamstate.engine.core.errors import UsageError

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off", "")

Duration = timedelta | str | float | int


def parse_duration(value: Duration, what: str = "duration") -> float:
    """Seconds of `7d`, `12h`, `30m`, `45s`, `2w`, a number of seconds (as a number or its
    text, as a template renders it) or a timedelta; it must be positive."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        m = _DURATION_RE.match(str(value)) if not isinstance(value, bool) else None
        if not m:
            raise UsageError(f"invalid {what} {value!r}", hint="write it like 7d, 12h, 30m, 45s, 2w or a number of seconds")
        seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if not seconds > 0:
        raise UsageError(f"{what} must be a positive duration, not {value!r}", hint="write it like 7d, 12h or 30m")
    return seconds


def optional_duration(value: Duration | None, what: str = "duration") -> float | None:
    """`parse_duration`, with None or "" meaning "not set"."""
    return None if value is None or value == "" else parse_duration(value, what)


def format_duration(seconds: float) -> str:
    """`7d`, `12h`, `30m` when exact (and short: an age of 15 days to the minute is `15.4d`,
    not `22221m`), else one decimal of the largest unit (`4.8h`)."""
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0 and seconds // size < 1000:
            return f"{int(seconds // size)}{unit}"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:g}s"


def parse_flag(value: Any, what: str = "flag") -> bool:
    """A yes/no that may arrive rendered from a template as text ("True", "false")."""
    if isinstance(value, bool) or value is None:
        return bool(value)
    if isinstance(value, int):
        return value != 0
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise UsageError(f"{what} must be true or false, not {value!r}", hint="write true or false")
