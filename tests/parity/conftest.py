"""The twin-test fixture: each parity test runs on the simulation and on real NFS.

As pyfakefs's fake/real twin tests do, one test body meets both backends:
``cluster`` is a session of the scenario framework, built on the simulation
(fast tier) or on the real mounts of ``NFS_MOUNTS`` (the ``real`` tier, run
inside compose/vm.py's VM).  The mounts the real tier needs, and their
options, are ``MOUNTS`` below; compose/ci_real_tier.sh mounts exactly these.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import pytest

from scenarios._base import ProcessSpec

# Host name -> nfs(5) options, shared by both backends.  Short attribute
# timeouts keep the real tier to seconds (DESIGN §3.5 measured acdirmin=3).
MOUNTS = {
    "a": "vers=3,acdirmin=3,acdirmax=3,acregmin=3,acregmax=3",
    "b": "vers=3,acdirmin=3,acdirmax=3,acregmin=3,acregmax=3",
    "pos": "vers=3,acdirmin=3,acdirmax=3,lookupcache=positive",
    "grow": "vers=3,acdirmin=3,acdirmax=12",
}


class Cluster:
    """Hosts of one backend; ``run`` starts plain functions on them together."""

    def __init__(self, backend: Any, hosts: dict[str, str]) -> None:
        self.backend = backend.name
        self._session = backend.session(hosts, seed=0)
        self._mounts = getattr(backend, "mounts", {})

    def run(self, *specs: tuple[str, Callable[..., Any], tuple[Any, ...]],
            timeout: float = 120.0) -> list[Any]:
        return self._session.run([ProcessSpec(host, target, args)
                                  for host, target, args in specs], timeout=timeout)

    def getattr_counter(self, host: str) -> Callable[[], int]:
        """A function, callable inside a process on ``host``, counting its GETATTRs."""
        if self.backend == "sim":
            def sim_count() -> int:
                from simfs import current_process

                process = current_process()
                assert process is not None
                return int(process.host.rpc_counts()["GETATTR"])
            return sim_count
        mount_point = self._mounts[host]

        def real_count() -> int:
            from scenarios._real import mountstats

            return mountstats(mount_point).get("GETATTR", 0)
        return real_count

    def close(self) -> None:
        self._session.close()


def _real_backend() -> Any:
    from scenarios._real import RealBackend

    return RealBackend.from_environment()


@pytest.fixture(params=["sim", pytest.param("real", marks=pytest.mark.real)])
def cluster(request: pytest.FixtureRequest) -> Any:
    if request.param == "sim":
        from scenarios._sim import SimBackend

        backend = SimBackend()
    else:
        if not os.environ.get("NFS_MOUNTS"):
            pytest.skip("no real NFS mounts: NFS_MOUNTS is unset (run the real tier with "
                        "compose/ci_real_tier.sh, which boots a VM with knfsd)")
        backend = _real_backend()
    cluster = Cluster(backend, MOUNTS)
    yield cluster
    cluster.close()


def pause(seconds: float) -> None:
    time.sleep(seconds)
