"""Identifiers a program reads from its machine, answered by the world.

A seed must give the same run on any machine and after any history of the
test process (docs/contributing.md, "Observable identifiers come from the
world").  These calls otherwise answer from the real process or machine:

- ``uuid.uuid1()`` packs the time and the machine's MAC address (libuuid's
  ``uuid_generate_time_safe``, or Python's fallback keeping the last
  timestamp in a module global).  Inside the world its time is the world's
  clock and its node the host's (``node_of``), and the "never twice the same
  timestamp" state is kept per host, as libuuid keeps it per machine (its
  clock file, RFC 4122 §4.2.1).  ``uuid.getnode()`` is the host's node.
- ``os.getppid()`` is 1: a simulated process's parent is not simulated, and
  its ``/proc/<pid>/stat`` and ``status`` already name 1 as the parent
  (see ``_proc``); the real answer is the test runner's parent.
- ``os.getuid()`` and the other user and group ids are 0: every file on the
  simulated export is owned by uid 0 and gid 0, as the simulated
  ``/proc/<pid>/status`` says the process is; the real id is the machine's
  (0 on one, 1000 on another), so a program checking ``st_uid ==
  os.getuid()`` (lock-file ownership) answered differently per machine.
- ``platform.uname()``/``platform.node()`` name the host: the real
  ``platform.uname()`` caches its first answer in a module global, so one
  call outside the world decided the node for every later world.
- ``os.cpu_count()`` and ``os.sched_getaffinity`` say ``CPUS``: the pool
  sizes programs derive from them (``ThreadPoolExecutor()`` starts
  ``cpu_count() + 4`` workers) decide how many simulated threads exist, so
  the real count made a seed schedule differently on another machine.
"""

from __future__ import annotations

import hashlib
import os
import platform
import uuid
import weakref
from collections.abc import Callable

from ..._engine._scheduler import Placement, Process
from .._registry import in_world, patch

# Every simulated host has this many CPUs (documented in docs/design.md).
CPUS = 4
# The parent pid of every simulated process: init, as its /proc files say.
PARENT_PID = 1
# The user and group of every simulated process and file (stat_result in _os._dirent).
OWNER_ID = 0
# 100-ns intervals between the UUID epoch (1582-10-15) and the Unix epoch (RFC 4122 §4.1.4).
_UUID_EPOCH_OFFSET = 0x01B21DD213814000

# Per host: the last version-1 timestamp handed out (libuuid's clock state).
_last_uuid_time: weakref.WeakKeyDictionary[Placement, int] = weakref.WeakKeyDictionary()


def node_of(host: Placement) -> int:
    """The host's 48-bit IEEE 802 node (its "MAC address") for ``uuid1``.

    Drawn from the host's name, not the seed, as a machine's MAC does not
    change between runs; the multicast bit is set, which RFC 4122 §4.5
    reserves for node ids that are not a real card's address.
    """
    digest = hashlib.blake2b(f"simfs-node:{host.name}".encode(), digest_size=6).digest()
    return int.from_bytes(digest, "big") | (1 << 40)


def _uuid1(real: Callable[..., uuid.UUID]) -> Callable[..., uuid.UUID]:
    def uuid1(process: Process, node: int | None = None,
              clock_seq: int | None = None) -> uuid.UUID:
        host = process.host
        now_ns = process.syscalls.wall_ns
        timestamp = now_ns // 100 + _UUID_EPOCH_OFFSET
        last = _last_uuid_time.get(host)
        if last is not None and timestamp <= last:
            timestamp = last + 1  # virtual time stands still between yields
        _last_uuid_time[host] = timestamp
        if clock_seq is None:
            clock_seq = process.group_random().getrandbits(14)
        if node is None:
            node = node_of(host)
        fields = (timestamp & 0xFFFFFFFF, (timestamp >> 32) & 0xFFFF,
                  (timestamp >> 48) & 0x0FFF, ((clock_seq >> 8) & 0x3F) | 0x80,
                  clock_seq & 0xFF, node)
        return uuid.UUID(fields=fields, version=1)

    return in_world(real, uuid1)


def _platform_uname(process: Process) -> platform.uname_result:
    """``platform.uname()`` of the host, computed afresh (never the real cache).

    ``processor`` is the machine type, set here: the real one runs
    ``uname -p`` as a subprocess on first use.
    """
    system, _, release, version, machine = os.uname()
    result = platform.uname_result(system, process.host.name, release, version, machine)
    result.__dict__["processor"] = machine  # the cached_property's slot
    return result


def install() -> None:
    patch(uuid, "uuid1", _uuid1(uuid.uuid1))
    patch(uuid, "getnode", in_world(uuid.getnode, lambda process: node_of(process.host)))
    patch(os, "getppid", in_world(os.getppid, lambda process: PARENT_PID))
    patch(os, "cpu_count", in_world(os.cpu_count, lambda process: CPUS))
    for name in ("getuid", "geteuid", "getgid", "getegid"):
        patch(os, name, in_world(getattr(os, name), lambda process: OWNER_ID))
    patch(os, "getgroups", in_world(os.getgroups, lambda process: [OWNER_ID]))
    for name in ("getresuid", "getresgid"):
        if hasattr(os, name):
            patch(os, name, in_world(getattr(os, name), lambda process: (OWNER_ID,) * 3))
    patch(platform, "uname", in_world(platform.uname, _platform_uname))
    if hasattr(os, "sched_getaffinity"):
        patch(os, "sched_getaffinity",
              in_world(os.sched_getaffinity, lambda process, pid: set(range(CPUS))))
