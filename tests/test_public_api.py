"""The public API documents itself: help() is a user's first reference."""

import inspect
import pydoc

import pytest

import simfs


def _public_members():
    for name in simfs.__all__:
        obj = getattr(simfs, name)
        if not inspect.isclass(obj):
            continue
        for attr, value in vars(obj).items():
            if attr.startswith("_"):
                continue
            function = value.fget if isinstance(value, property) else getattr(
                value, "__func__", value)
            if callable(function) or isinstance(value, property):
                yield f"{name}.{attr}", function


@pytest.mark.parametrize("qualified, function", list(_public_members()),
                         ids=[name for name, _ in _public_members()])
def test_every_public_method_and_property_has_a_docstring(qualified, function):
    assert (function.__doc__ or "").strip(), qualified


def test_help_on_world_tells_a_user_about_the_server_view_and_the_trace():
    text = pydoc.render_doc(simfs.World, renderer=pydoc.plaintext)
    assert "w.server" in text and "w.trace" in text
    assert "check=False" in text and "ProcessFailed" in text


@pytest.mark.parametrize("name", ["spawn_thread", "delayed_close", "next_ofd_id", "pid_alive",
                                  "next_object_serial"])
def test_internal_plumbing_is_not_public_api(name):
    assert not hasattr(simfs.World, name)


@pytest.mark.parametrize("name", ["wait_token", "joiners"])
def test_scheduler_bookkeeping_is_not_public_on_process(name):
    assert name not in simfs.Process.__slots__


def test_compute_is_public_and_tells_a_user_what_it_charges_and_when_it_refuses():
    assert "compute" in simfs.__all__
    text = pydoc.render_doc(simfs.compute, renderer=pydoc.plaintext)
    assert "virtual time" in text and "outside a simulated" in text


def test_help_on_world_tells_a_user_the_link_its_default_and_how_to_turn_it_off():
    text = pydoc.render_doc(simfs.World, renderer=pydoc.plaintext)
    assert 'link: the rate' in text and '"10Gbit/s"' in text and "None: data moves" in text
# The whole public surface of simfs, one name a line: a change to it is a
# visible diff here.  Adding a public name is adding its line (and its docs);
# the plugin's options are the pytest command line's.
PUBLIC_SURFACE = {
    "simfs": [
        "Attrs",
        "Belief",
        "BeliefRecorder",
        "BlockedOutsideSimulation",
        "ChooserError",
        "CloseDelay",
        "compute",
        "current_process",
        "Deadlock",
        "explore",
        "FAULTABLE_OPS",
        "FaultPlan",
        "FaultPlanError",
        "FaultRule",
        "Host",
        "HostCrash",
        "HostCrashed",
        "MountOptionError",
        "MountOptions",
        "MountOptionWarning",
        "native_guard",
        "posix",
        "Process",
        "ProcessFailed",
        "ProcessNotFinished",
        "render_html",
        "ReplayDiverged",
        "RunawaySimulation",
        "SharedModuleWarning",
        "SimfsError",
        "SimulationEscape",
        "StoreError",
        "strategies",
        "Timeline",
        "Trace",
        "TraceEvent",
        "UnknownKernel",
        "World",
    ],
    "simfs.World": [
        "choices",
        "close",
        "env",
        "environment",
        "epoch_ns",
        "explain",
        "export",
        "host",
        "hosts",
        "link",
        "max_events",
        "now",
        "now_ns",
        "plan",
        "processes",
        "run",
        "seed",
        "server",
        "spawn",
        "trace",
        "tz",
    ],
    "simfs.Host": [
        "belief",
        "client",
        "crashed",
        "kernel",
        "link",
        "local_disks",
        "mount",
        "name",
        "options",
        "processes",
        "rpc_counts",
        "world",
    ],
    "simfs.Process": [
        "active",
        "daemon",
        "describe",
        "done",
        "exception",
        "group",
        "group_random",
        "host",
        "ident",
        "kill",
        "last_call",
        "name",
        "native_id",
        "parent",
        "pid",
        "result",
        "shared_modules",
        "syscalls",
        "thread",
    ],
    "simfs.posix": [
        "close",
        "exists",
        "fstat",
        "fsync",
        "link",
        "listdir",
        "mkdir",
        "monotonic",
        "open",
        "read",
        "rename",
        "replace",
        "rmdir",
        "scandir",
        "sleep",
        "stat",
        "unlink",
        "utime",
        "write",
    ],
    "simfs.strategies": [
        "close_delays",
        "delays",
        "ERRNOS_BY_OP",
        "explore",
        "fault_plans",
        "fault_rules",
        "host_crashes",
        "mount_options",
        "MOUNT_PROFILES",
        "Schedule",
        "schedules",
        "worlds",
    ],
    "pytest options": [
        "--simfs-full-trace",
        "--simfs-replay",
        "--simfs-seed",
    ],
}


def _public(names):
    return {name for name in names if not name.startswith("_")}


def _surface():
    import simfs.posix
    import simfs.strategies
    from simfs import _pytest_plugin

    world = simfs.World(seed=1)
    host = world.host("a")
    process = world.spawn(host, int)
    world.run()
    options = []

    class Group:
        def addoption(self, *names, **kwargs):
            options.extend(names)

    class Parser:
        def getgroup(self, *args, **kwargs):
            return Group()

        addoption = Group.addoption

    _pytest_plugin.pytest_addoption(Parser())
    modules = {name for name in dir(simfs) if name.isidentifier()
               and inspect.ismodule(getattr(simfs, name)) and not name.startswith("_")}
    return {
        "simfs": set(simfs.__all__) | {"explore"} | modules,
        "simfs.World": _public(dir(world)),
        "simfs.Host": _public(dir(host)),
        "simfs.Process": _public(dir(process)),
        "simfs.posix": {name for name, value in vars(simfs.posix).items()
                        if not name.startswith("_") and callable(value)
                        and getattr(value, "__module__", None) == "simfs.posix"},
        "simfs.strategies": set(simfs.strategies.__all__),
        "pytest options": set(options),
    }


@pytest.mark.parametrize("where", sorted(PUBLIC_SURFACE))
def test_the_public_surface_is_exactly_the_listed_names(where):
    listed = set(PUBLIC_SURFACE[where])
    found = _surface()[where]
    assert (sorted(found - listed), sorted(listed - found)) == ([], []), (
        f"{where}: (public but not listed, listed but gone); a public name is a "
        "promise to users: list it here, or put it behind an underscore")


@pytest.mark.parametrize("name", ["clock", "scheduler", "server_state", "locks", "escapes",
                                  "faults", "random", "rpc_latency_ns", "failure_context"])
def test_the_world_s_plumbing_is_private(name):
    assert not hasattr(simfs.World(seed=1), name)


@pytest.mark.parametrize("name", ["name", "host", "pid", "group", "syscalls", "kill",
                                  "last_call", "parent", "daemon", "ident", "native_id"])
def test_a_process_s_identity_and_plumbing_are_read_only_views(name):
    world = simfs.World(seed=1)
    process = world.spawn(world.host("a"), int)
    with pytest.raises(AttributeError):
        setattr(process, name, None)


@pytest.mark.parametrize("name", ["seed", "export", "hosts", "processes", "server", "trace",
                                  "plan", "tz", "env", "epoch_ns", "max_events"])
def test_what_a_world_was_given_and_made_is_a_read_only_view(name):
    world = simfs.World(seed=1)
    with pytest.raises(AttributeError):
        setattr(world, name, None)


def test_a_world_s_hosts_and_processes_cannot_be_changed_through_its_views():
    world = simfs.World(seed=1)
    host = world.host("a")
    world.spawn(host, int)
    with pytest.raises(TypeError):
        world.hosts["b"] = host
    with pytest.raises(AttributeError):
        world.processes.append(None)
