"""Resource limits of a simulated process: Linux's defaults, the same on every machine.

The real limits are the test process's: a shell's ``ulimit``, a systemd
unit's ``LimitNOFILE=``, a CI runner's container (measured: 20000 open
files on one machine, 1024 on another), and programs size pools and caches
from ``getrlimit(RLIMIT_NOFILE)``.  Inside the world every process starts
with the limits a process started by a container runtime gets on Linux:

- the kernel's boot-time ``INIT_RLIMITS`` (include/asm-generic/resource.h):
  CPU, FSIZE, DATA, RSS, AS, LOCKS, RTTIME unlimited; STACK ``_STK_LIM``
  (8 MiB) soft, unlimited hard; CORE 0 soft, unlimited hard; MEMLOCK
  ``MLOCK_LIMIT`` (8 MiB since Linux 5.16); MSGQUEUE ``MQ_BYTES_MAX``
  (819200); NICE and RTPRIO 0;
- NPROC and SIGPENDING: ``fork_init`` (kernel/fork.c) sets both to
  ``max_threads / 2``, and ``set_max_threads`` gives a host with 16 GiB of
  memory 16 GiB / (8 * 16 KiB ``THREAD_SIZE``) = 131072 threads: 65536;
- NOFILE: 1024 soft (``INR_OPEN_CUR``, what ``select()`` can handle) and
  1048576 hard, ``fs.nr_open``'s default (fs/file.c), which a runtime
  whose unit says ``LimitNOFILE=infinity`` (Docker's, containerd's) hands
  its containers.

``os.sysconf`` answers from the same host: the limits it derives from
``getrlimit`` (glibc's ``__sysconf``: ``SC_OPEN_MAX`` NOFILE, ``SC_CHILD_MAX``
NPROC, ``SC_SIGQUEUE_MAX`` SIGPENDING, ``SC_ARG_MAX`` a quarter of the
stack limit), the host's ``CPUS`` for ``SC_NPROCESSORS_*`` (as
``os.cpu_count``), and its 16 GiB for ``SC_PHYS_PAGES``/``SC_AVPHYS_PAGES``
(``page size * phys pages`` is how programs size caches to the machine);
other names are constants of the platform and keep the real answer.

``setrlimit``/``prlimit`` set the process's own limits (its threads share
them), with the kernel's checks (soft above hard, or a hard NOFILE above
``nr_open``, is refused as CPython words it).  simfs enforces no limit:
raising one, or keeping it, changes nothing a run can observe, so it is
recorded; lowering a soft limit asks the kernel to start refusing something
(``EMFILE`` past a lowered NOFILE), which the simulation would not do, so
it fails loudly instead of giving a run that cannot happen.
"""

from __future__ import annotations

import os
from typing import Any

from ..._engine._scheduler import Process, ProcessGroup
from .._files import _fds
from .._registry import escape, in_world, patch
from ._ids import CPUS
from ._session import as_int, same_session

try:
    import resource
except ImportError:  # not on this platform: nothing to route
    resource = None  # type: ignore[assignment]

_INFINITY = -1 if resource is None else resource.RLIM_INFINITY
_MIB = 1024 * 1024
HOST_MEMORY = 16 << 30  # bytes of memory of every simulated host
_TASKS = 65536  # fork_init: max_threads / 2 on a 16 GiB host (see above)
_LEGACY_ARG_MAX = 131072  # glibc's floor for SC_ARG_MAX (ARG_MAX before Linux 2.6.23)
_RLIM_INFINITY_C = 2**64 - 1  # RLIM_INFINITY as glibc's unsigned rlim_t holds it
_real_sysconf = os.sysconf
# (soft, hard) by resource name, as a container's process starts with them.
DEFAULT_LIMITS: dict[str, tuple[int, int]] = {
    "RLIMIT_CPU": (_INFINITY, _INFINITY), "RLIMIT_FSIZE": (_INFINITY, _INFINITY),
    "RLIMIT_DATA": (_INFINITY, _INFINITY), "RLIMIT_STACK": (8 * _MIB, _INFINITY),
    "RLIMIT_CORE": (0, _INFINITY), "RLIMIT_RSS": (_INFINITY, _INFINITY),
    "RLIMIT_NPROC": (_TASKS, _TASKS), "RLIMIT_NOFILE": (1024, _fds.NR_OPEN),
    "RLIMIT_MEMLOCK": (8 * _MIB, 8 * _MIB), "RLIMIT_AS": (_INFINITY, _INFINITY),
    "RLIMIT_LOCKS": (_INFINITY, _INFINITY), "RLIMIT_SIGPENDING": (_TASKS, _TASKS),
    "RLIMIT_MSGQUEUE": (819200, 819200), "RLIMIT_NICE": (0, 0), "RLIMIT_RTPRIO": (0, 0),
    "RLIMIT_RTTIME": (_INFINITY, _INFINITY),
}


# The same by this platform's resource numbers, and their names back.
_DEFAULTS: dict[int, tuple[int, int]] = {
    getattr(resource, name): limits for name, limits in DEFAULT_LIMITS.items()
    if hasattr(resource, name)}
_NAMES: dict[int, str] = {
    getattr(resource, name): name for name in DEFAULT_LIMITS if hasattr(resource, name)}
# sysconf numbers back to their names, and the limits glibc derives from getrlimit.
_SYSCONF_NAMES = {value: key for key, value in os.sysconf_names.items()}
_SYSCONF_SOFT_LIMITS = {"SC_OPEN_MAX": "RLIMIT_NOFILE", "SC_CHILD_MAX": "RLIMIT_NPROC",
                        "SC_SIGQUEUE_MAX": "RLIMIT_SIGPENDING", "SC_ARG_MAX": "RLIMIT_STACK"}


def _above(value: int) -> float:
    """A limit as a number to compare: RLIM_INFINITY is above every other."""
    return float("inf") if value == _INFINITY else value


def _limits(environment: ProcessGroup, which: Any) -> tuple[int, int]:
    which = as_int(which)
    if which not in _DEFAULTS:
        raise ValueError("invalid resource specified")
    return environment.limits.get(which, _DEFAULTS[which])


def _set(process: Process, environment: ProcessGroup, which: int, limits: Any,
         call: str) -> None:
    current = _limits(environment, which)
    try:
        soft, hard = (int(value) for value in limits)
    except (TypeError, ValueError):
        raise ValueError("expected a tuple of 2 integers") from None
    if _above(soft) > _above(hard):
        raise ValueError("current limit exceeds maximum limit")
    if which == getattr(resource, "RLIMIT_NOFILE", None) and _above(hard) > _fds.NR_OPEN:
        raise ValueError("not allowed to raise maximum limit")  # EPERM above fs.nr_open
    if _above(soft) < _above(current[0]):
        raise escape(process, f"resource.{call}({_NAMES[which]}, {(soft, hard)}) lowers the "
                              f"soft limit {current[0]}; simfs enforces no resource limit, so "
                              "the run would not fail where a real one does")
    environment.limits[which] = (soft, hard)


def _environment_of_pid(process: Process, pid: Any) -> ProcessGroup:
    """The OS process (with its limits) ``pid`` names, as getsid finds it (ESRCH, TypeError)."""
    group = same_session(process, pid)
    if group == process.group.pid:
        return process.group
    # A live pid is a process group's on this host (same_session checked it).
    return next(other.group for other in process.syscalls.host_processes
                if other.group.pid == group)


def _getrlimit(process: Process, which: Any) -> tuple[int, int]:
    return _limits(process.group, which)


def _setrlimit(process: Process, which: Any, limits: Any) -> None:
    _set(process, process.group, which, limits, "setrlimit")


def _prlimit(process: Process, pid: Any, which: Any, limits: Any = None) -> tuple[int, int]:
    environment = _environment_of_pid(process, pid)
    previous = _limits(environment, which)
    if limits is not None:
        _set(process, environment, which, limits, "prlimit")
    return previous


def _sysconf(process: Process, name: Any) -> int:
    number = name
    if isinstance(name, str):
        if name not in os.sysconf_names:
            raise ValueError("unrecognized configuration name")
        number = os.sysconf_names[name]
    key = _SYSCONF_NAMES.get(number, "") if isinstance(number, int) else ""
    if key in ("SC_NPROCESSORS_CONF", "SC_NPROCESSORS_ONLN"):
        return CPUS
    if key in ("SC_PHYS_PAGES", "SC_AVPHYS_PAGES"):
        return HOST_MEMORY // _real_sysconf("SC_PAGE_SIZE")  # a fresh host: all of it free
    if key in _SYSCONF_SOFT_LIMITS and resource is not None:
        soft = _limits(process.group, getattr(resource, _SYSCONF_SOFT_LIMITS[key]))[0]
        if key == "SC_ARG_MAX":
            stack = _RLIM_INFINITY_C if soft == _INFINITY else soft
            return max(_LEGACY_ARG_MAX, stack // 4)
        return -1 if soft == _INFINITY else soft
    return _real_sysconf(name)  # a constant of the platform (page size, clock ticks)


def install() -> None:
    patch(os, "sysconf", in_world(_real_sysconf, _sysconf))
    if resource is None:
        return
    patch(resource, "getrlimit", in_world(resource.getrlimit, _getrlimit))
    patch(resource, "setrlimit", in_world(resource.setrlimit, _setrlimit))
    if hasattr(resource, "prlimit"):
        patch(resource, "prlimit", in_world(resource.prlimit, _prlimit))
