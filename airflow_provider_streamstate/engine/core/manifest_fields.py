"""Typed, range-checked reading of an untrusted manifest's header fields: one error per
field, naming the snapshot (engine/core/manifest.py validates the rest)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from airflow_provider_streamstate.engine.core.anchor import anchors_from_json, anchors_to_json
from airflow_provider_streamstate.engine.core.errors import UnsafeManifestError

STREAM_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MAX_BATCH_ID = 10**12 - 1


@dataclass(frozen=True)
class OperatorInfo:
    """A stateful operator of the query, as the checkpoint describes it."""

    operator_id: int
    name: str
    stores: list[str]
    partitions: int
    state_version: int  # the state version this snapshot holds (batch id + 1)
    # transformWithState: its state variables ({"name", "kind", "ttl"}) and time mode.
    state_variables: list[dict[str, Any]] = field(default_factory=list)
    time_mode: str | None = None

    @property
    def is_transform_with_state(self) -> bool:
        return bool(self.state_variables)

    def variable(self, name: str) -> dict[str, Any] | None:
        return next((v for v in self.state_variables if v["name"] == name), None)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"operator_id": self.operator_id, "name": self.name, "stores": list(self.stores),
                             "partitions": self.partitions, "state_version": self.state_version}
        if self.state_variables:  # only transformWithState operators have these
            d["state_variables"] = [dict(v) for v in self.state_variables]
            d["time_mode"] = self.time_mode
        return d


class Fields:
    """Typed, range-checked access to an untrusted manifest's fields (one error per field)."""

    def __init__(self, d: dict[str, Any], snapshot_id: str) -> None:
        self.d = d
        self.sid = snapshot_id

    def _bad(self, key: str, why: str) -> UnsafeManifestError:
        return UnsafeManifestError(f"manifest {self.sid} has an invalid {key}: {why}")

    def integer(self, key: str, lo: int, hi: int, value: Any = None) -> int:
        v = self.d.get(key) if value is None else value
        if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
            raise self._bad(key, f"{v!r} is not an integer in {lo}..{hi}")
        return v

    def optional_int(self, key: str) -> int | None:
        v = self.d.get(key)
        return None if v is None else self.integer(key, -(2**63), 2**63 - 1)

    def string(self, key: str, *, default: str | None = None) -> str:
        v = self.d.get(key, default)
        if not isinstance(v, str) or len(v) > 4096:
            raise self._bad(key, f"{v!r} is not a string")
        return v

    def optional_str(self, key: str) -> str | None:
        return None if self.d.get(key) is None else self.string(key)

    def timestamp(self, key: str) -> str:
        v = self.string(key)
        try:
            datetime.fromisoformat(v.replace("Z", "+00:00"))
        except ValueError:
            raise self._bad(key, f"{v!r} is not an ISO 8601 time") from None
        return v

    def str_map(self, key: str) -> dict[str, str]:
        v = self.d.get(key, {})
        if not isinstance(v, dict) or not all(isinstance(k, str) and isinstance(x, str) for k, x in v.items()):
            raise self._bad(key, "not an object of strings")
        return dict(v)

    def kafka_offsets(self, key: str) -> dict[str, dict[str, int]]:
        v = self.d.get(key, {})
        if not isinstance(v, dict):
            raise self._bad(key, "not an object")
        out: dict[str, dict[str, int]] = {}
        for topic, parts in v.items():
            if not isinstance(topic, str) or not topic or not isinstance(parts, dict):
                raise self._bad(key, f"topic {topic!r} is not an object of partitions")
            for p, o in parts.items():
                if not (isinstance(p, str) and p.isdigit()):
                    raise self._bad(key, f"partition {p!r} of {topic} is not a number")
                self.integer(key, -2, 2**63 - 1, value=o)
            out[topic] = {str(int(p)): o for p, o in parts.items()}
        return out

    def anchors(self, key: str) -> dict[str, Any] | None:
        v = self.d.get(key)
        if v is None:
            return None
        try:
            return anchors_to_json(anchors_from_json(v))
        except UnsafeManifestError as exc:
            raise self._bad(key, exc.message) from None

    def sources(self, key: str) -> list[dict[str, Any]]:
        v = self.d.get(key, [])
        if not isinstance(v, list):
            raise self._bad(key, "not a list")
        for i, src in enumerate(v):
            if not isinstance(src, dict) or src.get("index") != i or src.get("kind") not in ("kafka", "other"):
                raise self._bad(key, f"entry {i} is not {{'index': {i}, 'kind': 'kafka'|'other', 'offsets': ...}}")
        return [dict(src) for src in v]

    def operators(self, key: str) -> list[OperatorInfo]:
        v = self.d.get(key, [])
        if not isinstance(v, list):
            raise self._bad(key, "not a list")
        out = []
        for op in v:
            if not isinstance(op, dict):
                raise self._bad(key, f"{op!r} is not an object")
            stores = op.get("stores")
            if not isinstance(stores, list) or not stores or not all(
                isinstance(s, str) and STREAM_NAME_RE.match(s) for s in stores
            ):
                raise self._bad(key, f"stores {stores!r} are not a list of store names")
            name = op.get("name")
            if not isinstance(name, str):
                raise self._bad(key, f"operator name {name!r} is not a string")
            variables = op.get("state_variables", [])
            if not isinstance(variables, list) or not all(
                isinstance(v, dict) and isinstance(v.get("name"), str) and isinstance(v.get("kind"), str)
                and isinstance(v.get("ttl"), bool) for v in variables
            ):
                raise self._bad(key, f"state variables {variables!r} are not a list of {{name, kind, ttl}}")
            time_mode = op.get("time_mode")
            if time_mode is not None and not isinstance(time_mode, str):
                raise self._bad(key, f"time mode {time_mode!r} is not a string")
            out.append(
                OperatorInfo(
                    operator_id=self.integer(key, 0, 10**6, value=op.get("operator_id")),
                    name=name,
                    stores=list(stores),
                    partitions=self.integer(key, 1, 10**6, value=op.get("partitions")),
                    state_version=self.integer(key, 0, MAX_BATCH_ID + 1, value=op.get("state_version")),
                    state_variables=[{"name": v["name"], "kind": v["kind"], "ttl": v["ttl"]} for v in variables],
                    time_mode=time_mode,
                )
            )
        return out
