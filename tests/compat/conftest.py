"""Shared pieces of the compatibility tests: two hosts, and a real disk to watch.

Every library here runs unmodified inside simulated processes on two hosts
that mount one export with Linux's default options.  Each test also checks
that nothing reached the real disk: the real working directory is an empty
``tmp_path`` and the real ``/shared`` (where one exists) keeps its listing.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from simfs import World


def _shared_listing() -> list[str] | None:
    return sorted(os.listdir("/shared")) if os.path.isdir("/shared") else None


@pytest.fixture
def real_disk_untouched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[], bool]:
    """A check, to call at the end of a test: nothing appeared on the real disk."""
    monkeypatch.chdir(tmp_path)
    before = _shared_listing()

    def untouched() -> bool:
        return list(tmp_path.iterdir()) == [] and _shared_listing() == before

    return untouched


def two_hosts(seed: int = 0) -> tuple[World, object, object]:
    world = World(seed=seed)
    return world, world.host("a"), world.host("b")


def overlaps(log: list[tuple[str, str, float]]) -> list[tuple[str, str]]:
    """Pairs of critical sections of different holders that overlap in virtual time.

    ``log`` holds (holder, "in"|"out", time) entries in the order they happened.
    """
    open_at: dict[str, float] = {}
    sections: list[tuple[str, float, float]] = []
    for holder, edge, at in log:
        if edge == "in":
            open_at[holder] = at
        else:
            sections.append((holder, open_at.pop(holder), at))
    return [(a[0], b[0]) for i, a in enumerate(sections) for b in sections[i + 1:]
            if a[0] != b[0] and a[1] < b[2] and b[1] < a[2]]
