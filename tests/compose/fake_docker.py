"""A fake of the ``docker`` SDK client: the calls the compose backend makes, recorded.

Containers follow a script on a fake clock: each log line appears at its
time, and the container exits at its ``exit_at``.  Optionally a client
container really serves its host, as ``compose/nfs_client.sh`` would: an
agent (``scenarios._agent.AgentServer``) on the port its environment names,
over a plain directory instead of an NFS mount.
"""

from __future__ import annotations

import threading
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scenarios._agent import AgentServer


class FakeNotFound(Exception):
    """Stands for docker.errors.NotFound (and ImageNotFound, its subclass)."""


class FakeAPIError(Exception):
    """Stands for docker.errors.APIError."""


class FakeClock:
    """Time that moves only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@dataclass
class Script:
    """What a container prints, and when (fake seconds after it starts)."""

    lines: list[tuple[float, str]] = field(default_factory=list)
    exit_at: float | None = None


def client_script(host: str, mount_at: float = 2.0, listen_at: float = 3.0) -> Script:
    return Script([(0.0, f"simfs-client {host}: starting"),
                   (mount_at, f"simfs-client {host}: mounted 127.0.0.1:/export at /mnt/nfs"),
                   (listen_at, f"agent for host {host!r} (/mnt/nfs) listening on 0.0.0.0:7700")])


class FakeContainer:
    def __init__(self, engine: FakeEngine, name: str, kwargs: dict[str, Any],
                 script: Script) -> None:
        self.engine = engine
        self.name = name
        self.kwargs = kwargs
        self.labels = dict(kwargs.get("labels") or {})
        self.script = script
        self.started = engine.clock.now
        self.removed = False
        self.agent: AgentServer | None = None

    @property
    def status(self) -> str:
        if self.script.exit_at is not None and self.engine.clock.now >= (
                self.started + self.script.exit_at):
            return "exited"
        return "running"

    def reload(self) -> None:
        self.engine.calls.append(("reload", self.name))

    def logs(self, stdout: bool = True, stderr: bool = True) -> bytes:
        elapsed = self.engine.clock.now - self.started
        return "".join(f"{line}\n" for at, line in self.script.lines
                       if at <= elapsed).encode()

    def exec_run(self, cmd: list[str]) -> Any:
        self.engine.calls.append(("exec", self.name, tuple(cmd)))
        return types.SimpleNamespace(exit_code=0, output=b"")

    def remove(self, force: bool = False, v: bool = False) -> None:
        self.engine.calls.append(("remove-container", self.name))
        if self.engine.fail_remove == self.name:
            raise FakeAPIError(f"cannot remove {self.name}: device or resource busy")
        if self.engine.interrupt_remove == self.name:
            self.engine.interrupt_remove = None
            raise KeyboardInterrupt
        self.removed = True
        if self.agent is not None:
            self.agent.shutdown()
            self.agent.server_close()


class FakeImages:
    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine

    def get(self, name: str) -> Any:
        self.engine.calls.append(("image-get", name))
        if name not in self.engine.images:
            raise FakeNotFound(f"No such image: {name}")
        return types.SimpleNamespace(tags=[name])

    def pull(self, name: str) -> Any:
        self.engine.calls.append(("image-pull", name))
        if not self.engine.registry:
            raise FakeAPIError("Get https://registry-1.docker.io/v2/: dial tcp: "
                               "lookup registry-1.docker.io: no such host")
        self.engine.images.add(name)
        return types.SimpleNamespace(tags=[name])


class FakeContainers:
    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine

    def run(self, image: str, **kwargs: Any) -> FakeContainer:
        name = kwargs["name"]
        self.engine.calls.append(("run", name))
        if name in self.engine.refuse:
            raise FakeAPIError(f"error gathering device information for {name}")
        environment = kwargs.get("environment") or {}
        script = self.engine.scripts.get(name) or (
            client_script(environment["HOST"]) if "HOST" in environment else Script())
        container = FakeContainer(self.engine, name, {"image": image, **kwargs}, script)
        if self.engine.serve_agents is not None and "HOST" in environment:
            container.agent = self.engine.serve_agents(environment)
        self.engine.containers.append(container)
        return container

    def list(self, all: bool = False, filters: dict[str, str] | None = None
             ) -> list[FakeContainer]:
        self.engine.calls.append(("list-containers",))
        return [c for c in self.engine.containers
                if not c.removed and _matches(c.labels, filters)]


@dataclass
class FakeVolume:
    engine: FakeEngine
    name: str
    labels: dict[str, str]
    removed: bool = False

    def remove(self, force: bool = False) -> None:
        self.engine.calls.append(("remove-volume", self.name))
        self.removed = True


@dataclass
class FakeNetwork:
    engine: FakeEngine
    name: str
    labels: dict[str, str]
    removed: bool = False

    def remove(self) -> None:
        self.engine.calls.append(("remove-network", self.name))
        self.removed = True


class FakeVolumes:
    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine

    def create(self, name: str, labels: dict[str, str] | None = None) -> FakeVolume:
        self.engine.calls.append(("create-volume", name))
        volume = FakeVolume(self.engine, name, dict(labels or {}))
        self.engine.volumes.append(volume)
        return volume

    def list(self, filters: dict[str, str] | None = None) -> list[FakeVolume]:
        return [v for v in self.engine.volumes if not v.removed and _matches(v.labels, filters)]


class FakeNetworks:
    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine

    def list(self, filters: dict[str, str] | None = None) -> list[FakeNetwork]:
        return [n for n in self.engine.networks
                if not n.removed and _matches(n.labels, filters)]


def _matches(labels: dict[str, str], filters: dict[str, str] | None) -> bool:
    if not filters:
        return True
    key, _, value = filters["label"].partition("=")
    return labels.get(key) == value


class FakeEngine:
    """The engine behind the fake client: images, containers, volumes, networks."""

    def __init__(self, clock: FakeClock | None = None) -> None:
        self.clock = clock or FakeClock()
        self.calls: list[tuple[Any, ...]] = []
        self.images: set[str] = {"erichough/nfs-server:2.2.1", "python:3.11-slim-bookworm"}
        self.registry = False
        self.scripts: dict[str, Script] = {}
        self.refuse: set[str] = set()
        self.fail_remove: str | None = None
        self.interrupt_remove: str | None = None
        self.containers: list[FakeContainer] = []
        self.volumes: list[FakeVolume] = []
        self.networks: list[FakeNetwork] = []
        self.serve_agents: Callable[[dict[str, str]], AgentServer] | None = None
        self.images_api = FakeImages(self)

    def client(self) -> Any:
        return types.SimpleNamespace(images=self.images_api, containers=FakeContainers(self),
                                     volumes=FakeVolumes(self), networks=FakeNetworks(self),
                                     ping=lambda: True)

    def left(self) -> list[str]:
        """Names of everything not removed."""
        return ([c.name for c in self.containers if not c.removed]
                + [v.name for v in self.volumes if not v.removed]
                + [n.name for n in self.networks if not n.removed])


def serve_directories(base: Path) -> Callable[[dict[str, str]], AgentServer]:
    """Agents on the ports the containers are given, each over its own directory.

    All hosts share ``base/export``, as all clients share one export.
    """
    export = base / "export"
    export.mkdir(exist_ok=True)

    def start(environment: dict[str, str]) -> AgentServer:
        server = AgentServer(("127.0.0.1", int(environment["AGENT_PORT"])),
                             environment["HOST"], str(export), verify_nfs=False)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    return start
