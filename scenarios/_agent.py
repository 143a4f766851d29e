"""Run one host's scenario processes on another machine: ``python -m scenarios agent``.

With clients on two machines (compose/docker-compose.yml), each machine is
one host: its kernel is that host's NFS client.  The machine that runs
``python -m scenarios run NAME --backend real`` (the coordinator) starts its
own hosts' processes locally and asks the agent on each other machine to
start that host's; ``NFS_AGENTS`` maps host names to agents' addresses.

The protocol is one JSON object per line over TCP, one connection per
process: the coordinator sends ``{"target": "module:function", "args": [...],
"options": "vers=3"}``; the agent checks the mount and forks the process,
which waits; the agent answers ``{"ready": true}``; once every process of the
trial is ready the coordinator sends ``{"go": true}`` to all; the agent
answers with the result.  ``{"mountstats": true}`` returns the RPC counts.
Only functions of this project's packages can be named.

Results cross machines, so a scenario that compares times from two hosts
must use ``time.time()`` (kept in sync by NTP), not ``time.monotonic()``.
"""

from __future__ import annotations

import importlib
import json
import multiprocessing
import socket
import socketserver
import sys
import threading
from collections.abc import Callable
from multiprocessing import forkserver
from typing import Any

from ._base import ProcessSpec, ScenarioError

ALLOWED_PACKAGES = ("scenarios.", "reference.", "tests.")


def target_name(function: Callable[..., Any]) -> str:
    return f"{function.__module__}:{function.__qualname__}"


def resolve_target(name: str) -> Callable[..., Any]:
    """The function ``module:qualname`` names, from this project's packages only.

    Raises:
        ScenarioError: a malformed name, or one outside the project.
    """
    module_name, _, qualname = name.partition(":")
    if not qualname or not module_name.startswith(ALLOWED_PACKAGES):
        raise ScenarioError(f"agent: {name!r} is not a function of "
                            f"{', '.join(p.rstrip('.') for p in ALLOWED_PACKAGES)}")
    value: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        value = getattr(value, part)
    if not callable(value):
        raise ScenarioError(f"agent: {name!r} is not callable")
    result: Callable[..., Any] = value
    return result


def _send(stream: Any, message: dict[str, Any]) -> None:
    stream.write((json.dumps(message) + "\n").encode())
    stream.flush()


def _receive(stream: Any) -> dict[str, Any]:
    line = stream.readline()
    if not line:
        raise ConnectionError("the other end closed the connection")
    message: dict[str, Any] = json.loads(line)
    return message


class _Handler(socketserver.StreamRequestHandler):
    server: AgentServer

    def handle(self) -> None:
        try:
            request = _receive(self.rfile)
            if request.get("mountstats"):
                from ._real import mountstats

                _send(self.wfile, {"counts": mountstats(self.server.root)})
                return
            self._run(request)
        except Exception as error:  # report to the coordinator, keep serving
            try:
                _send(self.wfile, {"status": "error",
                                   "error": f"{type(error).__name__}: {error}"})
            except OSError:
                pass  # the coordinator is gone: nobody to tell

    def _run(self, request: dict[str, Any]) -> None:
        from ._real import _check_options, _child, await_waiting

        target = resolve_target(str(request["target"]))
        if self.server.verify_nfs:
            _check_options(self.server.host, self.server.root,
                           str(request.get("options", "vers=3")))
        # The agent serves each coordinator connection on its own thread, and
        # forking a threaded process can deadlock the child (Python 3.12
        # warns): fork from the single-threaded fork server instead, which
        # `serve` starts with the project imported (a spawned interpreter
        # took about a minute per process to import it under qemu's emulator).
        context = multiprocessing.get_context("forkserver")
        go = context.Event()
        receiver, sender = context.Pipe(duplex=False)
        spec = ProcessSpec(self.server.host, target, tuple(request.get("args", ())))
        process = context.Process(target=_child, args=(sender, spec, self.server.root, go))
        process.start()
        sender.close()
        released = False
        try:
            await_waiting(receiver, process, f"{request['target']} on {self.server.host!r}",
                          600)
            _send(self.wfile, {"ready": True})
            released = bool(_receive(self.rfile).get("go"))
        finally:
            # No "go" (a cancelled trial), or no coordinator any more (it
            # died between "ready" and "go"): the child would wait forever.
            if not released:
                process.kill()
                process.join()
        if not released:
            return
        go.set()
        status, payload = receiver.recv()
        process.join()
        if status == "ok":
            _send(self.wfile, {"status": "ok", "result": payload})
        else:
            name, message, text = payload
            _send(self.wfile, {"status": "error", "error": f"{name}: {message}\n{text}"})


class AgentServer(socketserver.ThreadingTCPServer):
    """Serves one host: its name and its mount point of the export."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], host: str, root: str, *,
                 verify_nfs: bool = True) -> None:
        """``verify_nfs=False`` serves a plain directory (tests of the machinery)."""
        super().__init__(address, _Handler)
        self.host = host
        self.root = root
        self.verify_nfs = verify_nfs


class RemoteProcess:
    """One process started on an agent; ``go()`` releases it, ``result()`` waits."""

    def __init__(self, address: str, spec: ProcessSpec, options: str, timeout: float) -> None:
        host, _, port = address.rpartition(":")
        self._socket = socket.create_connection((host, int(port)), timeout=timeout)
        self._stream = self._socket.makefile("rwb")
        _send(self._stream, {"target": target_name(spec.target), "args": list(spec.args),
                             "options": options})
        answer = _receive(self._stream)
        if not answer.get("ready"):
            raise ScenarioError(f"agent {address} for host {spec.host!r} refused "
                                f"{target_name(spec.target)}: {answer.get('error')}")
        self._spec = spec
        self._address = address

    def go(self) -> None:
        _send(self._stream, {"go": True})

    def cancel(self) -> None:
        """Tell the agent to kill the waiting process (a trial that will not run)."""
        try:
            _send(self._stream, {"go": False})
        except (OSError, ValueError):
            pass  # the agent is gone (its process with it), or the trial already ran
        finally:
            self._socket.close()

    def result(self) -> Any:
        try:
            answer = _receive(self._stream)
        finally:
            self._socket.close()
        if answer.get("status") != "ok":
            from ._real import RealProcessFailed

            raise RealProcessFailed(f"{target_name(self._spec.target)} on {self._spec.host!r} "
                                    f"(agent {self._address}) failed: {answer.get('error')}")
        return answer["result"]


def remote_mountstats(address: str, timeout: float = 30.0) -> dict[str, int]:
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as connection:
        stream = connection.makefile("rwb")
        _send(stream, {"mountstats": True})
        counts: dict[str, int] = _receive(stream)["counts"]
        return counts


def serve(host: str, root: str, listen: str) -> None:
    """Serve forever (until interrupted)."""
    address, _, port = listen.rpartition(":")
    # Start the fork server with the project imported before announcing the
    # agent, so that the first trial's processes fork as fast as the last.
    multiprocessing.get_context("forkserver").set_forkserver_preload(["scenarios._agent"])
    forkserver.ensure_running()
    with AgentServer((address or "0.0.0.0", int(port)), host, root) as server:
        print(f"agent for host {host!r} ({root}) listening on {listen}", file=sys.stderr,
              flush=True)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        thread.join()
