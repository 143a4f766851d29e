"""The simulation backend: each session is one simfs world, each host a client.

Trials of one session run one after another in the same world, so hosts
keep their caches from trial to trial, as on real mounts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from simfs import World

from ._base import ProcessSpec

EXPORT = "/shared"


class SimSession:
    """One world; ``run`` spawns processes with root ``/shared`` and runs them out."""

    def __init__(self, hosts: Mapping[str, str], seed: int, **world: Any) -> None:
        # The scenarios model what the seeds' hosts share besides the export
        # (refit's communicator and ledger RPCs, transfer's ssh pipe) as
        # objects handed to every process, whose classes and exceptions must
        # be the same ones in each: their processes share the test's modules.
        world.setdefault("per_process_modules", False)
        self.world = World(seed=seed, export=EXPORT, **world)
        self._events_per_run = self.world.max_events
        for name, mount in hosts.items():
            self.world.host(name, mount=mount)

    def run(self, processes: Sequence[ProcessSpec], *, timeout: float) -> list[Any]:
        spawned = [self.world.spawn(spec.host, spec.target, EXPORT, *spec.args,
                                    name=spec.name or spec.target.__name__)
                   for spec in processes]
        # The event budget guards each run (a loop that never lets virtual
        # time pass), not the session: every run here ends at ``until``, and
        # a session of 100,000 trials (--trials 100000) passed the world's
        # lifetime budget at trial 1,653 although each trial was bounded.
        self.world.run(until=self.world.now + timeout, max_events=self._events_per_run)
        return [process.result() for process in spawned]

    def rpc_counts(self, host: str) -> dict[str, int]:
        return dict(self.world.hosts[host].rpc_counts())

    def choices(self) -> list[int]:
        return self.world.choices

    def close(self) -> str:
        self.world.close()
        return self.world.trace.digest()


class SimBackend:
    """``--backend sim``: a deterministic world per session, seeded from the run."""

    name = "sim"

    def __init__(self, **world: Any) -> None:
        self._world = world

    def session(self, hosts: Mapping[str, str], seed: int) -> SimSession:
        return SimSession(hosts, seed, **self._world)

    def session_with(self, hosts: Mapping[str, str], seed: int, **world: Any) -> SimSession:
        """A session whose world also takes ``world`` (a fault plan), on top of
        this backend's own options (``--rpc-latency``, ``--link``)."""
        return SimSession(hosts, seed, **{**self._world, **world})
