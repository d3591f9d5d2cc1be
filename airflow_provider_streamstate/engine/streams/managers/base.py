"""The cluster-manager interface: where a Spark driver runs, and how anyone finds, watches
and stops it.

A spark-submit command names its cluster manager by its master (`local[*]`, `spark://`,
`yarn`, `k8s://`) and where its driver runs by its deploy mode. A driver in *client* mode
(every local and standalone run) is the process spark-submit starts on this host: the
launcher watches and signals that process (engine/streams/processes.py). A driver in
*cluster* mode runs on the cluster, and spark-submit only submits it; then the manager is
what every host asks: the application's state, its kill, and what it leaves behind.

Each manager answers `accepts(master)` (as Spark's own `ExternalClusterManager.canCreate`
does); `managers.manager_for(command)` asks them in order and nothing else compares master
strings. A new manager is a module with a subclass and one line in `managers/__init__.py`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Protocol

from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.engine.streams.command import option_value


class AppReport(Protocol):
    """What a cluster manager says of an application now."""

    @property
    def ended(self) -> bool: ...

    @property
    def diagnostics(self) -> str: ...

    @property
    def am_container_logs(self) -> str | None: ...

    @property
    def missing(self) -> bool:
        """The manager does not have it (yet): deleted, or not created by spark-submit yet."""
        ...

    def stream_state(self) -> str:
        """The launcher's word for it: starting, running, stopped, failed or dead."""
        ...

    def to_json(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class ClusterApp:
    """A driver a cluster manager runs (cluster deploy mode): where to ask about it, recorded
    beside the checkpoint so that any host that reaches the manager can watch and kill it.
    YARN: its application id and the ResourceManager; Kubernetes: its driver pod (named by
    the launcher)."""

    manager: str  # a registered manager's name: yarn | kubernetes
    app_id: str | None  # YARN: None until spark-submit said which (or when it failed to submit)
    rm_urls: list[str] = field(default_factory=list)
    user: str = ""  # who submitted it: YARN's REST API acts as this user
    namespace: str | None = None  # Kubernetes
    pod: str | None = None  # Kubernetes
    staging: str | None = None  # YARN: the application's staging directory (its confs), removed once it ended

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ClusterApp:
        if not isinstance(d.get("manager"), str) or not isinstance(d.get("rm_urls", []), list):
            raise ValueError("unknown cluster record")

        def text(key: str) -> str | None:
            return d[key] if isinstance(d.get(key), str) else None

        return cls(str(d["manager"]), text("app_id"), [str(u) for u in d.get("rm_urls", [])],
                   str(d.get("user") or ""), text("namespace"), text("pod"), text("staging"))


@dataclass(frozen=True)
class Prepared:
    """A command ready for spark-submit: the command, the environment spark-submit runs
    with, and where the application will be found (None: its driver is the process
    spark-submit starts here)."""

    command: list[str]
    env: dict[str, str]
    app: ClusterApp | None


class ClusterManager(ABC):
    """One kind of cluster manager. Instances hold no state: a launch's own facts are in its
    `ClusterApp`."""

    name: ClassVar[str]

    @abstractmethod
    def accepts(self, master: str) -> bool:
        """Whether `master` (spark-submit's `--master`, "" when not given) is this manager's."""

    def driver_on_cluster(self, command: Sequence[str]) -> bool:
        """Whether `command`'s driver runs on the cluster (cluster deploy mode), not here."""
        return False

    def check(self, command: Sequence[str], env: Mapping[str, str]) -> None:
        """Refuse, before anything is submitted, a command this manager cannot run (UsageError)."""
        if option_value(command, "--deploy-mode") == "cluster" and not self.driver_on_cluster(command):
            raise UsageError(f"{self.name} has no cluster deploy mode for Python applications",
                             hint="use client deploy mode here (or cluster mode on YARN or Kubernetes)")

    def prepare(self, command: Sequence[str], *, name: str, launch_id: str, settings: Mapping[str, str],
                env: Mapping[str, str]) -> Prepared:
        """`command` with what this manager needs for a driver on the cluster (return once
        submitted, one attempt, `settings` in the driver's environment) and where the
        application will be found; unchanged for a driver that runs here (it gets `settings`
        as its process environment). Refuses what `check` refuses."""
        self.check(command, env)
        return Prepared(list(command), dict(env), None)

    def identify(self, app: ClusterApp, output: str) -> ClusterApp:
        """`app` completed from what spark-submit printed once it submitted (YARN: the id)."""
        return app

    def known(self, app: ClusterApp) -> bool:
        """Whether the manager can be asked about `app` yet."""
        return False

    def describe(self, app: ClusterApp) -> str:
        """The application as people name it (an id, a pod)."""
        return str(app.app_id)

    def report(self, app: ClusterApp) -> AppReport:
        """What the manager says of `app` now; errors when it cannot be reached or does not know it."""
        raise NotImplementedError(f"{self.name} runs no driver on a cluster")

    def kill(self, app: ClusterApp) -> None:
        """Kill the application through the manager (NotFoundError when it is gone already)."""
        raise NotImplementedError(f"{self.name} runs no driver on a cluster")

    def clean_up(self, app: ClusterApp) -> list[str]:
        """Remove what an ended application left on the cluster (YARN: its staging directory,
        which holds its confs); what was removed. Never fails the caller."""
        return []
