"""Operator metadata v2: what Spark records of a transformWithState operator, and where.

A transformWithState (or transformWithStateInPandas) operator keeps, beside its state
stores, `state/<op>/_metadata/v2/<batch>` (its stores, partitions, time mode and state
variables) and the state schema files that names, `state/<op>/_stateSchema/<store>/<batch>_<uuid>`
(one schema per column family: each state variable, its TTL index, the timers). Spark
writes a new metadata file at the first batch of every run of the query (and a new schema
file when the schema evolves), and names the schema files by **absolute URI**
(`stateSchemaFilePaths`). A copy of the checkpoint at another location therefore still
reads the original's schema files, and neither restarts nor can be read once the original
is gone. `SchemaPathRewrite` gives a restored copy its own paths: the one file kind whose
content depends on where the checkpoint is.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from airflow_provider_streamstate.engine.checkpoint.offset_rewrite import hadoop_crc, sidecar_of
from airflow_provider_streamstate.engine.core.errors import UnsupportedCheckpointError

METADATA_V2_RE = re.compile(r"^state/(\d+)/_metadata/v2/(\d+)$")
_SCHEMA_FILE_RE = re.compile(r"/state/(\d+)/(_stateSchema/[A-Za-z0-9_.-]+/(\d+)_[0-9a-fA-F-]+)$")


@dataclass(frozen=True)
class StateVariable:
    """One state variable of a transformWithState operator, as its metadata declares it."""

    name: str
    kind: str  # ValueState | ListState | MapState | TimerState
    ttl: bool

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "ttl": self.ttl}


@dataclass(frozen=True)
class StoreSchema:
    store_name: str
    partitions: int
    schema_files: tuple[str, ...]  # relative to the checkpoint root


@dataclass(frozen=True)
class OperatorMetadataV2:
    operator_id: int
    name: str
    stores: tuple[StoreSchema, ...]
    time_mode: str | None
    state_variables: tuple[StateVariable, ...]


def schema_file_rel(recorded: str, op_id: int, where: str) -> str:
    """`state/<op>/_stateSchema/<store>/<file>` for a recorded schema file URI, checked to be
    this operator's; anything else is refused (a copy could not be pointed at it)."""
    found = _SCHEMA_FILE_RE.search(recorded)
    if found is None or int(found.group(1)) != op_id:
        raise UnsupportedCheckpointError(
            f"{where} names state schema file {recorded!r}, not one of operator {op_id}'s _stateSchema files",
            hint="snapshots support schema files Spark keeps in the checkpoint itself",
        )
    return f"state/{op_id}/{found.group(2)}"


def schema_file_batch(rel: str) -> int:
    """The batch a `_stateSchema/<store>/<batch>_<uuid>` file was written at."""
    return int(rel.rsplit("/", 1)[1].split("_", 1)[0])


def _parse(data: bytes, where: str) -> tuple[str, dict[str, Any]]:
    text = data.decode("utf-8", errors="replace")
    header, _, body = text.partition("\n")
    if header != "v2":
        raise UnsupportedCheckpointError(
            f"{where} has operator metadata version {header[:10]!r}, only 'v2' is understood here",
            hint="this checkpoint was written by a Spark version streamstate does not support",
        )
    try:
        doc = json.loads(body.strip())
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
    except ValueError as exc:
        raise UnsupportedCheckpointError(f"{where} is unreadable: {exc}") from None
    return header, doc


def parse_metadata_v2(data: bytes, op_id: int, where: str) -> OperatorMetadataV2:
    """An operator metadata v2 file; schema paths as checkpoint-relative paths."""
    _, doc = _parse(data, where)
    try:
        info = doc["operatorInfo"]
        if int(info["operatorId"]) != op_id:
            raise UnsupportedCheckpointError(f"{where} describes operator {info['operatorId']}, not {op_id}")
        stores = tuple(
            StoreSchema(str(s["storeName"]), int(s["numPartitions"]),
                        tuple(schema_file_rel(str(p), op_id, where) for p in s.get("stateSchemaFilePaths") or []))
            for s in doc["stateStoreInfo"]
        )
        props = json.loads(doc.get("operatorPropertiesJson") or "{}")
        return OperatorMetadataV2(op_id, str(info["operatorName"]), stores, props.get("timeMode"),
                                  state_variables_of(props))
    except (KeyError, TypeError, ValueError) as exc:
        raise UnsupportedCheckpointError(f"{where} is unreadable: {exc!r}") from None


def state_variables_of(properties: dict[str, Any]) -> tuple[StateVariable, ...]:
    """The state variables an operator's properties declare (`operatorPropertiesJson` of its
    metadata, `operatorProperties` of Spark's state-metadata source); none for other operators.
    Raises KeyError/TypeError/ValueError on a malformed declaration."""
    return tuple(
        StateVariable(str(v["stateName"]), str(v["stateVariableType"]), bool(v.get("ttlEnabled", False)))
        for v in properties.get("stateVariables") or []
    )


def _crc_target(rel: str) -> str | None:
    base = sidecar_of(rel)
    return base if base is not None and METADATA_V2_RE.match(base) else None


class SchemaPathRewrite:
    """Operator metadata v2 files naming their schema files at `location` (the restored
    checkpoint's URI: `file:/abs/path` or `s3a://bucket/prefix`); their Hadoop `.crc`
    sidecars follow. A restore applies it to every copy it makes."""

    def __init__(self, location: str) -> None:
        self.location = location.rstrip("/")

    def wants(self, rel: str) -> bool:
        return METADATA_V2_RE.match(rel) is not None or _crc_target(rel) is not None

    def rewrite(self, rel: str, data: bytes, rewritten: dict[str, bytes] | None = None) -> bytes | None:
        base = _crc_target(rel)
        if base is not None:
            return hadoop_crc(rewritten[base]) if rewritten and base in rewritten else None
        found = METADATA_V2_RE.match(rel)
        if found is None:
            return None
        op_id = int(found.group(1))
        header, doc = _parse(data, rel)
        changed = False
        for store in doc.get("stateStoreInfo") or []:
            paths = store.get("stateSchemaFilePaths") or []
            new = [f"{self.location}/{schema_file_rel(str(p), op_id, rel)}" for p in paths]
            if new != paths:
                store["stateSchemaFilePaths"] = new
                changed = True
        if not changed:
            return None
        return f"{header}\n{json.dumps(doc, separators=(',', ':'))}".encode()


class ChainedRewrite:
    """Several rewrites of one restore applied in turn (a failover's offsets and the copy's
    schema paths); a sidecar follows whatever its file became."""

    def __init__(self, *rewrites: Any) -> None:
        self.rewrites = [r for r in rewrites if r is not None]

    def wants(self, rel: str) -> bool:
        return any(r.wants(rel) for r in self.rewrites)

    def rewrite(self, rel: str, data: bytes, rewritten: dict[str, bytes] | None = None) -> bytes | None:
        base = sidecar_of(rel)
        if base is not None:
            return hadoop_crc(rewritten[base]) if rewritten and base in rewritten else None
        current: bytes | None = None
        for r in self.rewrites:
            new = r.rewrite(rel, data if current is None else current, rewritten)
            if new is not None:
                current = new
        return current
