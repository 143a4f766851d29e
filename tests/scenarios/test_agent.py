"""The host agent (``scenarios._agent``) cleans up after a coordinator that goes away.

A coordinator starts a process on an agent, which answers "ready" once the
process waits for "go".  If the coordinator dies in between (killed, or its
machine lost), the agent must not leave that process waiting for ever: on a
real host it would hold the mount busy and count against every later trial.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import socket
import threading
from pathlib import Path

from scenarios._agent import AgentServer, _receive, _send

# A generous bound on a process's exit once killed, not a timing claim: the
# test fails only if the process is still alive after it.
EXIT_BOUND_S = 60


def mark_started(root: str) -> None:
    """The target: leaves a file behind if it ever runs."""
    Path(root, "started").write_text("ran", encoding="utf-8")


def test_a_coordinator_gone_between_ready_and_go_leaves_no_process_waiting(tmp_path):
    server = AgentServer(("127.0.0.1", 0), "host-a", str(tmp_path), verify_nfs=False)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    waiting = None
    try:
        before = set(multiprocessing.active_children())
        with socket.create_connection(server.server_address, timeout=EXIT_BOUND_S) as link:
            stream = link.makefile("rwb")
            _send(stream, {"target": f"{__name__}:mark_started", "args": [],
                           "options": "vers=3"})
            assert _receive(stream) == {"ready": True}
            (waiting,) = set(multiprocessing.active_children()) - before
            stream.close()
        # The coordinator is gone without a "go": the agent kills the process.
        multiprocessing.connection.wait([waiting.sentinel], timeout=EXIT_BOUND_S)
        assert not waiting.is_alive()
        assert not (tmp_path / "started").exists()
    finally:
        if waiting is not None and waiting.is_alive():
            waiting.kill()  # the leak this test is about: do not keep it
        server.shutdown()
        server.server_close()
