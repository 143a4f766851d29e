"""Loud refusals: subprocesses and network sockets inside a simulated process.

Each raises ``SimulationEscape`` naming the process, its host and what it
tried, and the world re-raises it from ``run()`` even if the code caught it
(DESIGN §3.6).  Socket pairs (trio's own wake-up channel) are left alone:
they never leave the machine and carry no simulated state.
"""

from __future__ import annotations

import _socket
import socket
import subprocess
from typing import Any

from .._engine._scheduler import current_process
from ._registry import escape, patch


def _refuse_in_world(real: Any, what: str, *, method: bool = False) -> Any:
    def route(*args: Any, **kwargs: Any) -> Any:
        process = current_process()
        if process is None:
            return real(*args, **kwargs)
        # A method's self may be half-built (Popen.__init__): never repr it.
        shown = ", ".join(repr(arg) for arg in args[1 if method else 0:])
        raise escape(process, f"{what}({shown[:120]}) reaches the real machine")

    return route


def install() -> None:
    patch(subprocess.Popen, "__init__",
          _refuse_in_world(subprocess.Popen.__init__, "subprocess.Popen", method=True))
    for method in ("connect", "connect_ex", "bind", "sendto"):
        patch(socket.socket, method,
              _refuse_in_world(getattr(_socket.socket, method), f"socket.{method}",
                               method=True))
    for function in ("getaddrinfo", "gethostbyname", "gethostbyname_ex", "create_connection"):
        patch(socket, function, _refuse_in_world(getattr(socket, function),
                                                 f"socket.{function}"))
