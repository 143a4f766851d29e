"""The weight-broadcast handshake of seed 000, both sides, correct on NFS.

A broadcast of step ``k`` lives in ``<broadcast_dir>/step_<k>``, which the
sender recreates for every broadcast:

    sender                               receiver
    recreate step dir
    raise .sender_ready      ---->       wait for .sender_ready
    wait for .receiver_ready <----       raise .receiver_ready
    raise .started
    write weights (fsync, rename)
    raise .finished          ---->       wait for .finished
                                         read weights

Every wait revalidates the directories it polls (``wait_for_path``), so a
marker another host raised is seen within one poll instead of after the
negative-lookup cache expires (~30 s).  Order makes it safe: the weights are
written, fsynced and renamed into place, and the directory fsynced, before
``.finished`` exists, so a receiver that sees ``.finished`` and then opens
the weights (close-to-open) reads them whole.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from .fs import StrPath, atomic_write, fsync_directory, wait_for_path

SENDER_READY = ".sender_ready"
RECEIVER_READY = ".receiver_ready"
STARTED = ".started"
FINISHED = ".finished"
WEIGHTS = "weights.bin"


def step_dir(broadcast_dir: StrPath, step: int) -> Path:
    return Path(broadcast_dir) / f"step_{step}"


def raise_marker(path: StrPath) -> None:
    """Create an empty marker durably: the file, then its directory entry."""
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_directory(Path(path).parent)


def send_weights(broadcast_dir: StrPath, step: int, weights: bytes, *, timeout: float = 600.0,
                 poll: float = 0.1) -> None:
    """The trainer's side: publish ``weights`` for ``step`` to one receiver.

    Raises:
        TimeoutError: the receiver did not raise ``.receiver_ready`` in time.
    """
    directory = step_dir(broadcast_dir, step)
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(directory)
    os.makedirs(directory)
    raise_marker(directory / SENDER_READY)
    wait_for_path(directory / RECEIVER_READY, timeout=timeout, poll=poll)
    raise_marker(directory / STARTED)
    atomic_write(directory / WEIGHTS, weights)
    raise_marker(directory / FINISHED)


def receive_weights(broadcast_dir: StrPath, step: int, *, timeout: float = 600.0,
                    poll: float = 0.1) -> bytes:
    """The consumer's side: wait for ``step``'s broadcast and read its weights.

    Raises:
        TimeoutError: the sender did not raise a marker in time.
    """
    directory = step_dir(broadcast_dir, step)
    wait_for_path(directory / SENDER_READY, timeout=timeout, poll=poll)
    raise_marker(directory / RECEIVER_READY)
    wait_for_path(directory / FINISHED, timeout=timeout, poll=poll)
    with open(directory / WEIGHTS, "rb") as handle:
        return handle.read()
