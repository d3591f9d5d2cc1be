"""A pipeline: named streams (each a query with its own checkpoint) and the Kafka topics that
link them, declared once. Spark records the topics a query reads (its offset log), not the
ones it writes, so every link names its upstream, its topic and its downstream.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.engine.core.manifest import validate_stream_name

TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")  # Kafka's legal topic names


@dataclass(frozen=True)
class Link:
    """`upstream` writes `topic` (and is its only writer); `downstream` reads it."""

    upstream: str
    topic: str
    downstream: str

    def to_json(self) -> dict[str, str]:
        return {"upstream": self.upstream, "topic": self.topic, "downstream": self.downstream}


@dataclass(frozen=True)
class PipelineSpec:
    """`members`: stream name -> its checkpoint location (a path, a file://, s3a:// or hdfs:// URI)."""

    name: str
    members: dict[str, str]
    links: tuple[Link, ...]

    def __post_init__(self) -> None:
        validate_stream_name(self.name)
        if len(self.members) < 2:
            raise UsageError(f"pipeline {self.name} has {len(self.members)} member(s)",
                             hint="a pipeline links two or more streams; snapshot a single stream with `snapshot create`")
        for stream in self.members:
            validate_stream_name(stream)
        if not self.links:
            raise UsageError(f"pipeline {self.name} declares no link",
                             hint="name each link topic with its upstream and downstream stream")
        writers: dict[str, str] = {}
        readers: dict[str, str] = {}
        for link in self.links:
            for end in (link.upstream, link.downstream):
                if end not in self.members:
                    raise UsageError(f"link {link.topic} of pipeline {self.name} names {end}, which is not a member",
                                     hint=f"members are {', '.join(sorted(self.members))}")
            if link.upstream == link.downstream:
                raise UsageError(f"link {link.topic} of pipeline {self.name} links {link.upstream} to itself",
                                 hint="a link joins two different streams")
            if not TOPIC_RE.match(link.topic) or link.topic in (".", ".."):
                raise UsageError(f"link topic {link.topic!r} of pipeline {self.name} is not a Kafka topic name",
                                 hint="use 1-249 letters, digits, '.', '_' or '-'")
            if writers.setdefault(link.topic, link.upstream) != link.upstream:
                raise UsageError(f"topic {link.topic} has two upstreams in pipeline {self.name}",
                                 hint="a link topic has one writer: the cut relies on it")
            if readers.setdefault(link.topic, link.downstream) != link.downstream:
                raise UsageError(f"topic {link.topic} has two downstreams in pipeline {self.name}",
                                 hint="one downstream per link topic; a second reader is not supported yet")
        linked = {s for link in self.links for s in (link.upstream, link.downstream)}
        unlinked = sorted(set(self.members) - linked)
        if unlinked:
            raise UsageError(f"{', '.join(unlinked)} of pipeline {self.name} is linked to no other member",
                             hint="declare its link topic, or snapshot it on its own")
        self.order()  # refuses a cycle

    def outgoing(self, stream: str) -> list[Link]:
        return [link for link in self.links if link.upstream == stream]

    def incoming(self, stream: str) -> list[Link]:
        return [link for link in self.links if link.downstream == stream]

    def order(self) -> list[str]:
        """Members upstream first (a topological order; ties by name)."""
        pending = {s: {link.upstream for link in self.incoming(s)} for s in self.members}
        out: list[str] = []
        while pending:
            ready = sorted(s for s, ups in pending.items() if not ups)
            if not ready:
                raise UsageError(f"the links of pipeline {self.name} form a cycle ({', '.join(sorted(pending))})",
                                 hint="a pipeline's links must run one way: a cut needs an upstream end")
            for s in ready:
                out.append(s)
                del pending[s]
            for ups in pending.values():
                ups.difference_update(ready)
        return out

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "members": dict(sorted(self.members.items())),
                "links": [link.to_json() for link in self.links]}

    @classmethod
    def from_json(cls, d: Any, where: str = "pipeline spec") -> PipelineSpec:
        if not isinstance(d, dict):
            raise UsageError(f"{where} is not a JSON object", hint='write {"name": ..., "members": {...}, "links": [...]}')
        members, links = d.get("members"), d.get("links")
        if not isinstance(d.get("name"), str):
            raise UsageError(f"{where} has no name", hint='give "name": "<pipeline>"')
        if not isinstance(members, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in members.items()):
            raise UsageError(f"{where}: members must map stream names to checkpoint locations",
                             hint='e.g. "members": {"enrich": "s3a://bucket/ckpt/enrich", "totals": "..."}')
        if not isinstance(links, list) or not all(
                isinstance(x, dict) and all(isinstance(x.get(k), str) for k in ("upstream", "topic", "downstream"))
                for x in links):
            raise UsageError(f"{where}: links must be a list of {{upstream, topic, downstream}}",
                             hint='e.g. "links": [{"upstream": "enrich", "topic": "orders_enriched", "downstream": "totals"}]')
        return cls(d["name"], dict(members), tuple(Link(x["upstream"], x["topic"], x["downstream"]) for x in links))

    @classmethod
    def load(cls, path: str | Path) -> PipelineSpec:
        try:
            data = json.loads(Path(path).read_text())
        except OSError as exc:
            raise UsageError(f"cannot read pipeline spec {path}: {exc.strerror}", hint="give the path of a JSON file") from None
        except ValueError as exc:
            raise UsageError(f"pipeline spec {path} is not JSON: {exc}", hint="fix the file") from None
        return cls.from_json(data, str(path))
