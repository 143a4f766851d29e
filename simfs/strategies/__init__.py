"""Hypothesis strategies for simfs: mount options, fault plans, schedules, worlds.

The things that decide whether NFS-coordinating code works are the mount
options each host has, what fails and when, which of two simultaneous
processes runs first, and how late a close lands.  Each strategy here draws
one of them, and shrinks toward the least surprising value: Linux's default
options, no fault, the first runnable process first, no delay.  So a
minimal failing example names only what it needs.

    from simfs.strategies import explore, mount_options

    @explore(hosts={"a": "vers=3", "b": mount_options()})
    def test_the_marker_is_seen(world):
        world.spawn("a", publish, "/shared/m")
        waiter = world.spawn("b", wait_for, "/shared/m")
        world.run(until=60)
        assert waiter.result()

Hypothesis is imported by this package, and only by it: ``import simfs`` does not
load it (``simfs.explore`` imports it on first use).
"""

from ._conditions import (
    ERRNOS_BY_OP,
    MOUNT_PROFILES,
    close_delays,
    delays,
    fault_plans,
    fault_rules,
    host_crashes,
    mount_options,
)
from ._worlds import Schedule, explore, schedules, worlds

__all__ = [
    "ERRNOS_BY_OP",
    "MOUNT_PROFILES",
    "Schedule",
    "close_delays",
    "delays",
    "explore",
    "fault_plans",
    "fault_rules",
    "host_crashes",
    "mount_options",
    "schedules",
    "worlds",
]
