"""The compose stack on a Docker engine: an NFS server and one client container per host.

This is what ``compose/docker-compose.yml`` defines, driven through the
``docker`` SDK so that ``--backend compose`` can bring it up, wait for every
mount, and always take it down again.  Every container uses the engine
host's network: knfsd and the NFS client belong to that host's kernel, and
NFSv3 locking needs the server's lockd to reach each client's lockd
(``NLM_GRANTED`` callbacks) and statd to reach statd on ports rpcbind hands
out (compose/README.md).  Each client mounts with ``nosharecache``: two
clients on one kernel would otherwise share one superblock, so one cache
(nfs(5); docs/design.md, "Real NFS").

Each client container runs ``compose/nfs_client.sh`` as an agent
(``scenarios._agent``): the coordinator is this process, outside the
containers, and reaches every host's agent over TCP.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._base import ScenarioError

LABEL = "io.simfs.compose.project"
MOUNTED = "mounted "  # nfs_client.sh: "simfs-client HOST: mounted SERVER:EXPORT at /mnt/nfs"
LISTENING = "listening on"  # scenarios._agent.serve
CLIENT_MOUNT = "/mnt/nfs"
SERVER_EXPORT_IN_CONTAINER = "/export"  # erichough/nfs-server exports this path
REPOSITORY = Path(__file__).resolve().parent.parent


class ComposeError(ScenarioError):
    """A step of bringing the stack up or down failed; the message names the step."""

    def __init__(self, step: str, message: str) -> None:
        super().__init__(f"backend compose: step '{step}' failed: {message}")
        self.step = step


@dataclass(frozen=True)
class StackConfig:
    """Where the stack runs and what it runs; see ``ComposeBackend.from_environment``."""

    project: str = "simfs"
    server_image: str = "erichough/nfs-server:2.2.1"
    client_image: str = "python:3.11-slim-bookworm"
    # An existing server's address; None starts the server container.
    nfs_server: str | None = None
    nfs_export: str = SERVER_EXPORT_IN_CONTAINER
    agent_address: str = "127.0.0.1"
    agent_port: int = 7700
    ready_timeout: float = 300.0
    poll_interval: float = 1.0
    log_dir: str | None = None
    source: str = str(REPOSITORY)


def _tail(text: str, lines: int = 15) -> str:
    kept = text.rstrip().splitlines()[-lines:]
    return "\n".join(f"  | {line}" for line in kept) or "  | (no output)"


class ComposeStack:
    """Brings the containers up for a set of hosts, and takes everything down.

    Args:
        client: a ``docker.DockerClient`` (or a fake with the same methods).
        config: images, addresses, ports and timeouts.
        not_found: the SDK's "no such object" exception types.
        clock, sleep: for the readiness waits (tests pass a fake clock).
    """

    def __init__(self, client: Any, config: StackConfig, *,
                 not_found: tuple[type[BaseException], ...],
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._client = client
        self._config = config
        self._not_found = not_found
        self._clock = clock
        self._sleep = sleep
        self._labels = {LABEL: config.project}
        self.hosts: dict[str, str] = {}
        self.timings: dict[str, float] = {}

    @property
    def _filters(self) -> dict[str, str]:
        return {"label": f"{LABEL}={self._config.project}"}

    def up(self, hosts: Mapping[str, str]) -> dict[str, str]:
        """Start the server (unless external) and one client per host; wait for each.

        Args:
            hosts: host name -> nfs(5) options (``nosharecache`` is added).

        Returns:
            host name -> "address:port" of the agent serving that host.

        Raises:
            ComposeError: naming the step that failed; what was started is
                taken down before it propagates (as on KeyboardInterrupt).
        """
        started = self._clock()
        try:
            agents = self._up(hosts)
        except BaseException:
            self.down()
            raise
        self.hosts = dict(hosts)
        self.timings["up_s"] = self._clock() - started
        return agents

    def _up(self, hosts: Mapping[str, str]) -> dict[str, str]:
        self.down()  # a run killed without teardown leaves its containers
        config = self._config
        images = [config.client_image] if config.nfs_server else [config.server_image,
                                                                   config.client_image]
        for image in images:
            self._ensure_image(image)
        server_address = config.nfs_server or "127.0.0.1"
        server = None if config.nfs_server else self._start_server()
        clients = {}
        for index, (host, options) in enumerate(hosts.items()):
            port = config.agent_port + index
            clients[host] = (self._start_client(host, options, server_address, port), port)
        agents = {}
        for host, (container, port) in clients.items():
            self._wait_for(container, MOUNTED, f"mount-host-{host}", server)
            self._wait_for(container, LISTENING, f"agent-host-{host}", server)
            agents[host] = f"{config.agent_address}:{port}"
        return agents

    def _ensure_image(self, image: str) -> None:
        try:
            self._client.images.get(image)
            return
        except self._not_found:
            pass
        except Exception as error:
            raise ComposeError(f"image {image}", f"cannot ask the engine for it: {error}") from None
        try:
            self._client.images.pull(image)
        except Exception as error:
            raise ComposeError(
                f"image {image}",
                f"it is not on the engine and pulling it failed ({error}); without a "
                f"registry, build it offline (compose/build_images.sh) and select it with "
                f"NFS_CLIENT_IMAGE / NFS_SERVER_IMAGE") from None

    def _run(self, step: str, **kwargs: Any) -> Any:
        try:
            return self._client.containers.run(detach=True, privileged=True,
                                               network_mode="host", labels=self._labels,
                                               **kwargs)
        except Exception as error:
            raise ComposeError(step, f"the engine refused to start {kwargs['name']}: "
                                     f"{error}") from None

    def _start_server(self) -> Any:
        config = self._config
        volume = f"{config.project}-nfs-export"
        try:
            self._client.volumes.create(name=volume, labels=self._labels)
        except Exception as error:
            raise ComposeError("server", f"cannot create volume {volume}: {error}") from None
        return self._run(
            "server", image=config.server_image, name=f"{config.project}-nfs-server",
            environment={"NFS_EXPORT_0": f"{SERVER_EXPORT_IN_CONTAINER} *(rw,sync,"
                                         "no_subtree_check,no_root_squash,insecure,fsid=1)"},
            volumes={volume: {"bind": SERVER_EXPORT_IN_CONTAINER, "mode": "rw"},
                     "/lib/modules": {"bind": "/lib/modules", "mode": "ro"}})

    def _start_client(self, host: str, options: str, server: str, port: int) -> Any:
        config = self._config
        return self._run(
            f"start-host-{host}", image=config.client_image,
            name=f"{config.project}-host-{host}",
            entrypoint=["/bin/sh"], command=["/src/compose/nfs_client.sh"],
            environment={"HOST": host, "ROLE": "agent", "NFS_SERVER": server,
                         "NFS_EXPORT": config.nfs_export,
                         "NFS_OPTIONS": f"{options},nosharecache",
                         "AGENT_PORT": str(port), "PYTHONDONTWRITEBYTECODE": "1"},
            volumes={config.source: {"bind": "/src", "mode": "ro"}})

    def _wait_for(self, container: Any, marker: str, step: str, server: Any) -> None:
        """Poll the container's log for ``marker``; fail if it exits or time runs out."""
        deadline = self._clock() + self._config.ready_timeout
        while True:
            logs = self._logs(container)
            if marker in logs:
                return
            container.reload()
            if container.status not in ("created", "running"):
                raise ComposeError(step, f"{container.name} {container.status} before it "
                                         f"printed {marker.strip()!r}; its last lines:\n"
                                         f"{_tail(logs)}{self._server_note(server)}")
            if self._clock() >= deadline:
                raise ComposeError(step, f"{container.name} did not print "
                                         f"{marker.strip()!r} within "
                                         f"{self._config.ready_timeout:g} s; its last lines:"
                                         f"\n{_tail(logs)}{self._server_note(server)}")
            self._sleep(self._config.poll_interval)

    def _server_note(self, server: Any) -> str:
        if server is None:
            return (f"\n(server {self._config.nfs_server}:{self._config.nfs_export}: is it "
                    "up and exporting? compose/README.md, 'When a mount fails')")
        server.reload()
        return f"\nserver container {server.name} is {server.status}; its last lines:\n" \
               f"{_tail(self._logs(server))}"

    @staticmethod
    def _logs(container: Any) -> str:
        data = container.logs(stdout=True, stderr=True)
        return data.decode(errors="replace") if isinstance(data, bytes) else str(data)

    def down(self) -> list[str]:
        """Remove every container, volume and network of the project; never raises.

        Each client's NFS mount is lazily unmounted first, so that a server
        already gone cannot leave the container's removal hanging on it.

        Returns:
            what could not be removed (empty when everything went).
        """
        started = self._clock()
        problems: list[str] = []
        interrupted: BaseException | None = None
        for kind, remove in (("container", self._remove_container),
                             ("volume", lambda volume: volume.remove(force=True)),
                             ("network", lambda network: network.remove())):
            collection = getattr(self._client, f"{kind}s")
            try:
                found = (collection.list(all=True, filters=self._filters) if kind == "container"
                         else collection.list(filters=self._filters))
            except Exception as error:
                problems.append(f"cannot list {kind}s: {error}")
                continue
            # Clients before the server: they hold its mounts.
            for item in sorted(found, key=lambda thing: "nfs-server" in thing.name):
                try:
                    remove(item)
                except KeyboardInterrupt as error:  # finish tearing down, then stop
                    interrupted = error
                except Exception as error:
                    problems.append(f"{kind} {item.name}: {error}")
        self.hosts = {}
        self.timings["down_s"] = self._clock() - started
        if interrupted is not None:
            raise interrupted
        return problems

    def _remove_container(self, container: Any) -> None:
        if self._config.log_dir:
            os.makedirs(self._config.log_dir, exist_ok=True)
            with open(os.path.join(self._config.log_dir, f"{container.name}.log"), "w",
                      encoding="utf-8") as handle:
                handle.write(self._logs(container))
        if "-host-" in container.name:
            container.reload()
            if container.status == "running":
                try:
                    container.exec_run(["umount", "-l", CLIENT_MOUNT])
                except Exception:
                    pass  # removal below still takes the mount namespace with it
        container.remove(force=True, v=True)
