"""``--backend compose``: the scenario's hosts are client containers on a Docker engine.

The stack is compose/docker-compose.yml's (an NFSv3 server and one client
container per host, all on the engine host's network), brought up through
the ``docker`` SDK (``pip install '.[compose]'``) when the first session
asks for its hosts, and taken down when the run ends, fails or is
interrupted.  Each client container mounts the export with the options the
scenario asks for plus ``nosharecache`` and serves its host's processes as
an agent (``scenarios._agent``); this process is the coordinator, so the
session is a ``RealSession`` whose every host is remote and the results
(and ``--json``) land here.

Settings (environment, all optional):

- ``DOCKER_HOST``: the engine (the SDK's default: the local socket).
- ``NFS_SERVER``: the address of an NFS server already running (another
  machine, or the VM's knfsd); unset starts the server container.
- ``NFS_EXPORT``: the path that server exports (default ``/export``).
- ``NFS_SERVER_IMAGE``, ``NFS_CLIENT_IMAGE``: images (defaults: the compose
  file's); ``COMPOSE_PROJECT_NAME``: names and labels (default ``simfs``).
- ``AGENT_PORT``: the first client's agent port (default 7700; the next
  host gets the next port); ``NFS_AGENT_ADDRESS``: where this process
  reaches the agents (default 127.0.0.1, the engine's host).
- ``COMPOSE_READY_TIMEOUT``: seconds each host gets to mount and to start
  its agent (default 300); ``COMPOSE_LOG_DIR``: keep every container's log
  there at teardown.
"""

from __future__ import annotations

import atexit
import importlib
import os
import signal
import sys
from collections.abc import Callable, Mapping
from typing import Any

from ._base import ScenarioError
from ._compose_stack import ComposeError, ComposeStack, StackConfig
from ._real import RealSession

DEFAULT_SOCKET = "unix:///var/run/docker.sock"

__all__ = ["ComposeBackend", "ComposeError", "StackConfig", "config_from_environment",
           "connect", "open_for_cli"]


def _number(environ: Mapping[str, str], name: str, default: float, kind: type,
            minimum: float, maximum: float | None = None) -> Any:
    text = environ.get(name)
    if text is None or text == "":
        return kind(default)
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or value < minimum or (maximum is not None and value > maximum):
        allowed = (f"{minimum:g}-{maximum:g}" if maximum is not None
                   else f">= {minimum:g}")
        raise ScenarioError(f"{name}={text!r}: allowed: a {kind.__name__} {allowed}")
    return value


def config_from_environment(environ: Mapping[str, str]) -> StackConfig:
    """The stack's settings from ``environ`` (see the module docstring).

    Raises:
        ScenarioError: a setting that is not a number in its range.
    """
    default = StackConfig()
    # One port per host follows AGENT_PORT: leave room below 65535.
    port = _number(environ, "AGENT_PORT", default.agent_port, int, 1, 65000)
    return StackConfig(
        project=environ.get("COMPOSE_PROJECT_NAME") or default.project,
        server_image=environ.get("NFS_SERVER_IMAGE") or default.server_image,
        client_image=environ.get("NFS_CLIENT_IMAGE") or default.client_image,
        nfs_server=environ.get("NFS_SERVER") or None,
        nfs_export=environ.get("NFS_EXPORT") or default.nfs_export,
        agent_address=environ.get("NFS_AGENT_ADDRESS") or default.agent_address,
        agent_port=port,
        ready_timeout=_number(environ, "COMPOSE_READY_TIMEOUT", default.ready_timeout,
                              float, 1),
        log_dir=environ.get("COMPOSE_LOG_DIR") or None)


def connect(environ: Mapping[str, str],
            from_env: Callable[[], Any] | None = None) -> tuple[Any, tuple[type, ...]]:
    """A client of the engine ``environ`` points at, and the SDK's not-found errors.

    Fails at once, before anything runs, when no engine answers.

    Raises:
        ScenarioError: the SDK is not installed, or no engine answers; the
            message names the address tried and how to point at another.
    """
    try:  # imported by name: the SDK is optional and ships no type hints
        docker = importlib.import_module("docker")
        errors = importlib.import_module("docker.errors")
    except ImportError:
        raise ScenarioError("backend compose needs the docker SDK: pip install "
                            "'.[compose]' (or pip install 'docker>=7,<8')") from None
    tried = environ.get("DOCKER_HOST") or f"{DEFAULT_SOCKET} (DOCKER_HOST is unset)"
    try:
        client = (from_env or docker.from_env)()
        client.ping()
    except Exception as error:
        raise ScenarioError(
            f"backend compose: no Docker engine answers at {tried}: {error}. Start one "
            f"(dockerd), or point DOCKER_HOST at one: DOCKER_HOST=unix:///path/docker.sock, "
            f"ssh://user@machine or tcp://machine:2376 (the SDK does not read 'docker "
            f"context')") from None
    return client, (errors.NotFound,)


class ComposeBackend:
    """``--backend compose``: one client container per host, kept across sessions.

    The stack stays up while the sessions ask for the same hosts with the
    same options (a real export outlives runs, as on the VM); other options
    mean other mounts, so the clients are started again.  ``close`` (or
    leaving a ``with`` block) takes everything down.
    """

    name = "compose"

    def __init__(self, stack: ComposeStack,
                 report: Callable[[str], None] = lambda message: None) -> None:
        self.stack = stack
        self._agents: dict[str, str] = {}
        self._report = report

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None,
                         report: Callable[[str], None] = lambda message: None
                         ) -> ComposeBackend:
        """Connect to the engine now, so that a missing one fails before any run.

        Raises:
            ScenarioError: a bad setting, no SDK, or no engine.
        """
        environ = os.environ if environ is None else environ
        config = config_from_environment(environ)
        client, not_found = connect(environ)
        return cls(ComposeStack(client, config, not_found=not_found), report)

    def session(self, hosts: Mapping[str, str], seed: int) -> RealSession:
        if dict(hosts) != self.stack.hosts:
            wanted = ", ".join(f"{host} ({options})" for host, options in hosts.items())
            self._report(f"compose: bringing up {wanted}")
            self._agents = self.stack.up(hosts)
            self._report(f"compose: stack up in {self.stack.timings['up_s']:.1f} s")
        return RealSession({}, hosts, agents=self._agents)

    def close(self) -> None:
        """Take the stack down; report what could not be removed."""
        problems = self.stack.down()
        self._agents = {}
        self._report(f"compose: stack down in {self.stack.timings['down_s']:.1f} s")
        for problem in problems:
            self._report(f"compose: teardown: {problem}")

    def __enter__(self) -> ComposeBackend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def open_for_cli() -> ComposeBackend:
    """The backend for ``python -m scenarios``: torn down however the process ends.

    Teardown runs at interpreter exit (normal, error, Ctrl-C), and SIGTERM
    (CI's timeout) is turned into KeyboardInterrupt so that it does too.
    """
    backend = ComposeBackend.from_environment(
        report=lambda message: print(message, file=sys.stderr, flush=True))
    atexit.register(backend.close)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _raise_interrupt)
    return backend
