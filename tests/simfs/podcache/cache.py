"""Download-once cache: a module-level lock and memo, as a real worker keeps them."""

from __future__ import annotations

import os
import threading

_lock = threading.Lock()
_memo: dict[str, str] = {}
downloads: list[str] = []


def fetch(name: str, directory: str) -> str:
    """The path of ``name`` in ``directory``, downloaded by this process at most once."""
    with _lock:
        if name in _memo:
            return _memo[name]
        path = os.path.join(directory, name)
        if not os.path.exists(path):
            with open(path + f".tmp{os.getpid()}", "wb") as out:
                out.write(b"weights")
            os.replace(path + f".tmp{os.getpid()}", path)
            downloads.append(name)
        _memo[name] = path
        return path


def pod(name: str, directory: str) -> tuple[int, int, int]:
    """Fetch twice; (downloads this process made, memo size, id of its lock)."""
    fetch(name, directory)
    fetch(name, directory)
    return len(downloads), len(_memo), id(_lock)


def pod_with_a_helper_thread(name: str, directory: str) -> tuple[int, int]:
    """A second thread of the same process sees the same module state."""
    fetch(name, directory)
    seen: list[int] = []
    thread = threading.Thread(target=lambda: seen.append(len(_memo)))
    thread.start()
    thread.join()
    return seen[0], len(_memo)
