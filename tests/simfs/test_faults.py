"""Fault plans: validated data that prints as code, and what each rule does."""

import errno
import os

import pytest

import simfs
from simfs import CloseDelay, FaultPlan, FaultPlanError, FaultRule, HostCrash, World, posix

from .helpers import run_alone


@pytest.mark.parametrize("kwargs, message", [
    ({"op": "frobnicate", "errno": errno.EIO}, "unknown op 'frobnicate'"),
    ({"op": "stat", "errno": 99999}, "unknown errno 99999"),
    ({"op": "stat", "path": "ckpt/*", "errno": errno.EIO}, "absolute glob"),
    ({"op": "stat"}, "needs an errno, a delay"),
    ({"op": "stat", "errno": errno.EIO, "nth": 0}, "nth must be an int >= 1"),
    ({"op": "stat", "errno": errno.EIO, "window": (2.0, 1.0)}, "start < end"),
    ({"op": "stat", "errno": errno.EIO, "nth": 1, "window": (0, 1)}, "nth or window"),
    ({"op": "stat", "delay": -1.0}, "delay must be"),
])
def test_a_malformed_fault_rule_is_refused_with_the_reason(kwargs, message):
    with pytest.raises(FaultPlanError, match=message):
        FaultRule(**kwargs)


def test_a_plan_naming_an_unknown_host_is_refused_at_run():
    world = World(faults=FaultPlan(rules=(FaultRule(op="stat", errno=errno.EIO, host="zz"),)))
    world.host("a")
    with pytest.raises(FaultPlanError, match=r"unknown hosts \['zz'\]; hosts: a"):
        world.run()


def test_a_plan_repr_pastes_back_as_an_equal_plan():
    plan = FaultPlan(
        rules=(FaultRule(op="unlink", path="/shared/ckpt/*", errno=errno.EBUSY, host="a", nth=2),
               FaultRule(op="stat", delay=0.5, window=(1.0, 2.0))),
        close_delays=(CloseDelay(path="/shared/ckpt/*/w", seconds=0.3),),
        crashes=(HostCrash(host="b", at=4.0),))
    namespace = {"errno": errno, **{name: getattr(simfs, name) for name in simfs.__all__}}
    assert eval(repr(plan), namespace) == plan
    assert "errno.EBUSY" in repr(plan)


def _stat_each(paths):
    outcomes = []
    for path in paths:
        try:
            posix.stat(path)
            outcomes.append("ok")
        except OSError as error:
            outcomes.append(errno.errorcode[error.errno])
        posix.sleep(1.0)
    return outcomes


def test_nth_fails_only_the_nth_matching_call():
    plan = FaultPlan(rules=(FaultRule(op="stat", path="/shared/d*", errno=errno.EIO, nth=2),))
    world = World(faults=plan)
    world.server.mkdir("/shared/d")
    result = run_alone(world, world.host("a"), _stat_each, ["/shared/d", "/shared", "/shared/d",
                                                            "/shared/d"])
    assert result == ["ok", "ok", "EIO", "ok"]
    assert world.trace.select(op="stat")[2].outcome == "EIO (injected)"


def test_a_window_fails_calls_inside_it_only():
    plan = FaultPlan(rules=(FaultRule(op="stat", errno=errno.ESTALE, window=(1.0, 3.0)),))
    world = World(faults=plan)
    result = run_alone(world, world.host("a"), _stat_each, ["/shared"] * 4)
    assert result == ["ok", "ESTALE", "ESTALE", "ok"]


def test_a_rule_for_another_host_does_not_fire():
    plan = FaultPlan(rules=(FaultRule(op="stat", errno=errno.EIO, host="b"),))
    world = World(faults=plan)
    world.host("b")
    assert run_alone(world, world.host("a"), _stat_each, ["/shared"]) == ["ok"]


def test_a_delay_rule_makes_the_call_take_virtual_time():
    plan = FaultPlan(rules=(FaultRule(op="mkdir", delay=2.5),))
    world = World(faults=plan)

    def timed():
        posix.mkdir("/shared/d")
        return posix.monotonic()

    assert run_alone(world, world.host("a"), timed) == 2.5


def test_a_close_delay_keeps_the_silly_renamed_file_until_the_close_lands():
    def writer():
        fd = posix.open("/shared/d/w", os.O_CREAT | os.O_WRONLY, 0o644)
        posix.write(fd, b"x")
        posix.unlink("/shared/d/w")
        posix.close(fd)  # returns at once; the close lands 0.4 s later
        seen = []
        for _ in range(3):
            seen.append(len(posix.listdir("/shared/d")))
            posix.sleep(0.2)
        return seen

    plan = FaultPlan(close_delays=(CloseDelay(path="/shared/d/*", seconds=0.4),))
    world = World(faults=plan)
    world.server.mkdir("/shared/d")
    assert run_alone(world, world.host("a"), writer) == [1, 1, 0]
    landed = world.trace.select(op="close-landed")
    assert len(landed) == 1 and landed[0].time == pytest.approx(0.4)


def test_a_crashed_host_leaves_nfs_files_forever_and_loses_unflushed_writes():
    def doomed():
        fd = posix.open("/shared/held", os.O_CREAT | os.O_WRONLY, 0o644)
        posix.write(fd, b"flushed")
        posix.fsync(fd)
        posix.unlink("/shared/held")
        other = posix.open("/shared/lost", os.O_CREAT | os.O_WRONLY, 0o644)
        posix.write(other, b"never flushed")
        posix.sleep(10.0)

    world = World(faults=FaultPlan(crashes=(HostCrash(host="a", at=1.0),)))
    process = world.spawn(world.host("a"), doomed)
    world.run()
    names = world.server.listdir("/shared")
    assert len(names) == 2 and names[1] == "lost" and names[0].startswith(".nfs")
    assert world.server.read_bytes("/shared/lost") == b""
    with pytest.raises(simfs.HostCrashed):
        process.result()
