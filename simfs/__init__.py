"""simfs: a deterministic simulation of NFS client semantics.

Several hosts share one NFSv3 export, each through its own Linux-like
client cache, under a virtual clock; users' own Python code runs as
processes on them, deterministically from a seed.

    from simfs import World
    w = World(seed=1)
    a = w.host("a", mount="vers=3")
    b = w.host("b", mount="vers=3,acdirmin=3,acdirmax=3")
    p = w.spawn(b, poll_for_marker, "/shared/t/marker")
    w.run()
    p.result(); w.now; w.trace.format(); b.rpc_counts()
"""

from typing import TYPE_CHECKING

from ._engine._scheduler import Process, current_process
from ._engine._trace import Trace, TraceEvent
from ._errors import (
    BlockedOutsideSimulation,
    ChooserError,
    Deadlock,
    FaultPlanError,
    HostCrashed,
    MountOptionError,
    MountOptionWarning,
    ProcessFailed,
    ProcessNotFinished,
    ReplayDiverged,
    RunawaySimulation,
    SharedModuleWarning,
    SimfsError,
    SimulationEscape,
    StoreError,
)
from ._nfs._beliefs import Belief
from ._nfs._faults import FAULTABLE_OPS, CloseDelay, FaultPlan, FaultRule, HostCrash
from ._nfs._kernels import UnknownKernel
from ._nfs._mount import MountOptions
from ._nfs._server import Attrs
from ._world import Host, World


def native_guard(enable: bool = False) -> str:
    """Whether native file calls from simulated processes are caught, and if not why.

    On by default where the machine allows it (Linux x86_64/aarch64, kernel
    5.5+, seccomp allowed): the first World turns it on unless
    ``SIMFS_NATIVE_GUARD=0``.  A seccomp filter on simulated processes'
    threads refuses a real filesystem change made by native code, and any
    native open or stat of a path under the export, and fails the run with
    ``SimulationEscape`` (``simfs/_patch/_guards/_native_guard.py``).  Where
    it cannot run, the answer says why.

    Args:
        enable: install the guard now (before any World), if this machine allows it.

    Raises:
        ValueError: ``SIMFS_NATIVE_GUARD`` is set to something else than 0 or 1.
    """
    from ._patch._guards import _native_guard

    return _native_guard.enable() if enable else _native_guard.status()

def compute(seconds: float) -> None:
    """Charge the calling simulated process ``seconds`` of virtual time for work.

    Compute is free in a world: only sleeps, waits and RPCs (their latency
    and the data they move over the link) take virtual time.  A test that
    wants a step's work to take time (hashing a download, a training step)
    calls this where the work is; the trace shows it as a ``compute`` event.
    Other processes run meanwhile, as on other CPUs.

    Raises:
        SimfsError: called outside a simulated process (there is no virtual
            time to charge: the real one would pass, silently).
        TypeError, ValueError: ``seconds`` is not a finite number >= 0.
    """
    process = current_process()
    if process is None:
        raise SimfsError(f"simfs.compute({seconds!r}) was called outside a simulated "
                         "process: only a process spawned in a World has virtual time "
                         "to charge")
    process.syscalls.compute(seconds)


__all__ = [
    "FAULTABLE_OPS",
    "Attrs",
    "Belief",
    "BeliefRecorder",
    "BlockedOutsideSimulation",
    "ChooserError",
    "CloseDelay",
    "Deadlock",
    "FaultPlan",
    "FaultPlanError",
    "FaultRule",
    "Host",
    "HostCrash",
    "HostCrashed",
    "MountOptionError",
    "MountOptionWarning",
    "MountOptions",
    "Process",
    "ProcessFailed",
    "ProcessNotFinished",
    "ReplayDiverged",
    "RunawaySimulation",
    "SharedModuleWarning",
    "SimfsError",
    "SimulationEscape",
    "StoreError",
    "Timeline",
    "Trace",
    "TraceEvent",
    "UnknownKernel",
    "World",
    "compute",
    "current_process",
    "native_guard",
    "render_html",
]

if TYPE_CHECKING:  # at run time __getattr__ below imports them on first use
    from ._report import BeliefRecorder as BeliefRecorder
    from ._report import Timeline as Timeline
    from ._report import render_html as render_html
    from .strategies import explore as explore

# The belief timeline and its HTML report, imported on first use: a run
# that writes no report should not pay for them at start-up (issue 16).
_REPORT_NAMES = frozenset({"BeliefRecorder", "Timeline", "render_html"})


def __getattr__(name: str) -> object:
    """``simfs.explore`` and the report names, imported on first use.

    ``explore`` brings Hypothesis with it, so it is left out of ``__all__``
    and ``from simfs import *`` stays cheap too.
    """
    if name == "explore":
        from .strategies import explore

        return explore
    if name in _REPORT_NAMES:
        from . import _report

        return getattr(_report, name)
    raise AttributeError(f"module 'simfs' has no attribute {name!r}")
