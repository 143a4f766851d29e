"""The twin-test fixture: each parity test runs on the simulation and on real NFS.

As pyfakefs's fake/real twin tests do, one test body meets both backends:
``cluster`` is a session of the scenario framework, built on the simulation
(fast tier) or on the real mounts of ``NFS_MOUNTS`` (the ``real`` tier, run
inside compose/vm.py's VM).  The mounts the real tier needs, and their
options, are ``MOUNTS`` below; compose/ci_real_tier.sh mounts exactly these.

Where client kernel releases differ (docs/nfs-facts.md, "Kernel 6.12": the 6.12
lock grant), a test reads ``cluster.kernel``: the simulation runs every test
once per measured kernel profile (``sim-6.1``, ``sim-6.12``), and the real
backend uses the profile of the kernel it runs on (``uname -r`` in the VM, e.g.
6.12.117+deb12-amd64 under ``VM_KERNEL=6.12``), so a real pass on 6.12 is
checked against the 6.12 facts.

Over NFSv4.1 (docs/nfs-facts.md, "NFSv4.1 and 4.2") the simulation runs every
test once more with the hosts mounted ``vers=4.1`` (``sim-6.1-v4.1``: the
releases with a measured v4.1 profile), and the real tier runs them over
v4.1 when ``PARITY_NFS_VERS=4.1`` says its mounts are v4.1 ones
(compose/ci_real_tier.sh with ``VM_NFS_VERS=4.1`` sets both).  Where v4.1
differs a test reads ``cluster.kernel.vers`` or the v4.1 fact in the profile.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import pytest

from scenarios._base import ProcessSpec
from simfs._nfs._kernels import KERNELS, V4_KERNELS, KernelProfile, running_kernel_profile

# Host name -> nfs(5) options, shared by both backends.  Short attribute
# timeouts keep the real tier to seconds (docs/nfs-facts.md, "Attribute and
# dentry caches" measured acdirmin=3).
MOUNTS = {
    "a": "vers=3,acdirmin=3,acdirmax=3,acregmin=3,acregmax=3",
    "b": "vers=3,acdirmin=3,acdirmax=3,acregmin=3,acregmax=3",
    "pos": "vers=3,acdirmin=3,acdirmax=3,lookupcache=positive",
    "grow": "vers=3,acdirmin=3,acdirmax=12",
}
# The lock modes (docs/nfs-facts.md, "Lock modes"): mode -> its option, and
# per mode two hosts, the holder's (1) and another (2); ``a`` and ``b`` are
# the default mode's (local_lock=none).  NFSv3 only: a v4 mount clears these
# options (nfs_fs_context_validate) and simfs refuses them there, so the
# hosts are not in MOUNTS, which a v4.1 pass remounts over v4.1; .ci/run's
# VM_HOSTS mounts them for the v3 pass.
LOCK_MODES = {"nolock": "nolock", "lflock": "local_lock=flock",
              "lposix": "local_lock=posix", "lall": "local_lock=all"}
LOCK_MOUNTS = {f"{mode}{n}": f"vers=3,{option}" for mode, option in LOCK_MODES.items()
               for n in (1, 2)}
# The NFS version of the real tier's mounts: 3 unless the VM mounted v4.1.
REAL_VERS = os.environ.get("PARITY_NFS_VERS", "3")


def mounts(vers: str) -> dict[str, str]:
    """MOUNTS with every host mounted over NFS version ``vers``."""
    return {host: options.replace("vers=3", f"vers={vers}") for host, options in MOUNTS.items()}


class Cluster:
    """Hosts of one backend; ``run`` starts plain functions on them together."""

    def __init__(self, backend: Any, hosts: dict[str, str], kernel: KernelProfile) -> None:
        self.backend = backend.name
        self.kernel = kernel
        if backend.name == "sim":
            # SimSession makes its hosts with the default kernel; make them
            # here instead, each with this cluster's kernel profile.
            self._session = backend.session({}, seed=0)
            for name, mount in hosts.items():
                self._session.world.host(name, mount=mount, kernel=kernel.release)
        else:
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

    def delay_counter(self, host: str) -> Callable[[], int]:
        """A function, callable inside a process on ``host``, counting the
        calls its client was refused with NFS4ERR_DELAY and retried (the
        ``delay`` event of /proc/self/mountstats; the model's trace records
        each refused attempt as ``NFS4ERR_DELAY``)."""
        if self.backend == "sim":
            def sim_count() -> int:
                from simfs import current_process

                process = current_process()
                assert process is not None
                return int(process.host.rpc_counts()["NFS4ERR_DELAY"])
            return sim_count
        mount_point = self._mounts[host]

        def real_count() -> int:
            return mountstats_delay(mount_point)
        return real_count

    def close(self) -> None:
        self._session.close()


# The events line of /proc/self/mountstats counts NFSIOS_DELAY 25th
# (fs/nfs/iostat.h, nfs_stat_eventcounters: ... shortreads, shortwrites, delay).
_DELAY_EVENT = 24


def mountstats_delay(mount_point: str) -> int:
    """The ``delay`` event count of the NFS mount at ``mount_point``."""
    inside = False
    with open("/proc/self/mountstats", encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("device "):
                inside = f" mounted on {mount_point} " in line
            elif inside and line.strip().startswith("events:"):
                return int(line.split()[1 + _DELAY_EVENT])
    raise LookupError(f"no events line for {mount_point} in /proc/self/mountstats")


def _real_backend() -> Any:
    from scenarios._real import RealBackend

    return RealBackend.from_environment()


def _cluster(param: str, hosts: Callable[[str], dict[str, str]]) -> Cluster:
    """The cluster of one fixture parameter, its hosts ``hosts(vers)``."""
    if param.startswith("sim-"):
        from scenarios._sim import SimBackend

        backend = SimBackend()
        release, _, vers = param.removeprefix("sim-").partition("-v")
        vers = vers or "3"
        kernel = KERNELS[release] if vers == "3" else V4_KERNELS[release, vers]
    else:
        if not os.environ.get("NFS_MOUNTS"):
            pytest.skip("no real NFS mounts: NFS_MOUNTS is unset (run the real tier with "
                        "compose/ci_real_tier.sh, which boots a VM with knfsd)")
        backend = _real_backend()
        # The client under test is this machine's kernel (the VM's guest).
        vers = REAL_VERS
        kernel = running_kernel_profile(os.uname().release, vers)
    return Cluster(backend, hosts(vers), kernel)


@pytest.fixture(params=[*(f"sim-{release}" for release in KERNELS),
                        *(f"sim-{release}-v{vers}" for (release, vers) in V4_KERNELS
                          if vers == "4.1"),
                        pytest.param("real", marks=pytest.mark.real)])
def cluster(request: pytest.FixtureRequest) -> Any:
    cluster = _cluster(request.param, mounts)
    yield cluster
    cluster.close()


def lock_mounts(vers: str) -> dict[str, str]:
    """The hosts of the lock-mode tests: ``a`` and ``b`` and LOCK_MOUNTS (NFSv3)."""
    assert vers == "3", vers  # lock_cluster has no v4 parameter
    return {"a": MOUNTS["a"], "b": MOUNTS["b"], **LOCK_MOUNTS}


@pytest.fixture(params=[*(f"sim-{release}" for release in KERNELS),
                        *([pytest.param("real", marks=pytest.mark.real)]
                          if REAL_VERS == "3" else [])])
def lock_cluster(request: pytest.FixtureRequest) -> Any:
    """``cluster`` with the lock-mode hosts, over NFSv3 only: a v4 mount clears
    ``nolock`` and ``local_lock`` (docs/nfs-facts.md, "Lock modes"), so there
    is no v4.1 parameter, and a real tier run over v4.1 has none either."""
    cluster = _cluster(request.param, lock_mounts)
    yield cluster
    cluster.close()


def pause(seconds: float) -> None:
    time.sleep(seconds)
