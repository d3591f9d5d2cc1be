"""Decoded state values as JSON: what `KeyLookup.to_json` and a CLI or a page would show."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import math
from typing import Any


def to_jsonable(value: Any) -> Any:
    """Dates and timestamps as ISO 8601, decimals as strings (exact), bytes as base64,
    non-finite floats as strings, map pairs as [key, value] lists."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {k: to_jsonable(v) for k, v in value.items()}
        return [[to_jsonable(k), to_jsonable(v)] for k, v in value.items()]
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    return str(value)
