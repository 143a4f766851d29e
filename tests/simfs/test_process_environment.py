"""A simulated process's environment comes from the world, never from the real one.

Each test first gives the real process an environment that a leak would
show (another user, a CI variable), then checks what the simulated program
sees.  The default is a fixed root login environment (simfs/_os/_machine.py).
"""

from __future__ import annotations

import functools
import getpass
import os
import threading
import time
from collections.abc import Callable

import pytest

from simfs import SimulationEscape, World

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _default(host: str) -> dict[str, str]:
    return {"HOME": "/root", "HOSTNAME": host, "LANG": "C.UTF-8", "LOGNAME": "root",
            "PATH": DEFAULT_PATH, "TZ": "UTC", "USER": "root"}


def _result(program: Callable[[], object], world: World | None = None, **spawn: object
            ) -> object:
    world = world or World(seed=1)
    host = world.hosts.get("a") or world.host("a")
    process = world.spawn(host, program, **spawn)  # type: ignore[arg-type]
    world.run()
    return process.result()


@pytest.fixture
def real_user(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real process runs as another user, with a CI variable and a terminal width."""
    for name, value in (("USER", "alice"), ("LOGNAME", "alice"), ("HOME", "/home/alice"),
                        ("CI_JOB_ID", "4242"), ("COLUMNS", "211")):
        monkeypatch.setenv(name, value)


@pytest.mark.usefixtures("real_user")
def test_a_simulated_process_sees_the_world_environment_whatever_user_runs_the_test():
    from os import environ as bound_early  # a module that bound environ before simfs

    def program() -> list[object]:
        return [dict(os.environ), getpass.getuser(), os.getenv("CI_JOB_ID"),
                bound_early.get("USER"), os.environb.get(b"HOME"), len(os.environ),
                "COLUMNS" in os.environ, os.environ.copy() == dict(os.environ)]

    seen = _result(program)
    assert seen == [_default("a"), "root", None, "root", b"/root", 7, False, True]


def test_changes_a_process_makes_are_its_own_shared_by_its_threads_and_never_real():
    def writer() -> list[object]:
        os.environ["MODE"] = "train"
        os.environb[b"RAW"] = b"1"
        del os.environ["LANG"]
        os.putenv("ONLY_C", "x")  # the C environment: os.environ does not show it
        seen: list[object] = []
        thread = threading.Thread(target=lambda: seen.append(os.environ.get("MODE")))
        thread.start()
        thread.join()
        return [*seen, os.environ.get("RAW"), "LANG" in os.environ, os.environ.get("ONLY_C")]

    def reader() -> list[str | None]:
        time.sleep(1)  # after the writer
        return [os.environ.get("MODE"), os.environ.get("LANG")]

    real_before = dict(os.environ)
    world = World(seed=1)
    host = world.host("a")
    first = world.spawn(host, writer)
    second = world.spawn(host, reader)
    world.run()
    assert first.result() == ["train", "1", False, None]
    assert second.result() == [None, "C.UTF-8"]
    assert dict(os.environ) == real_before
    assert os.getenv("ONLY_C") is None


def test_world_env_and_spawn_env_change_the_default_and_none_removes_a_variable():
    world = World(seed=1, env={"HF_HOME": "/shared/hf", "LANG": None})
    expected = {**_default("a"), "HF_HOME": "/shared/hf"}
    del expected["LANG"]
    assert world.environment(world.host("a")) == expected
    seen = _result(lambda: dict(os.environ), world, env={"RANK": "1", "HF_HOME": None})
    del expected["HF_HOME"]
    assert seen == {**expected, "RANK": "1"}


def test_spawn_env_is_refused_for_a_target_that_takes_env_itself():
    def launch(env: dict[str, str] | None = None) -> object:
        return env

    world = World(seed=1)
    host = world.host("a")
    with pytest.raises(TypeError, match=r"'launch' also accepts a keyword 'env'.*partial"):
        world.spawn(host, launch, env={"A": "1"})
    with pytest.raises(TypeError, match="also accepts a keyword 'env'"):
        world.spawn(host, lambda **options: options, env={"A": "1"})
    # The target's own env still reaches it through partial; spawn's sets the process's.
    process = world.spawn(host, functools.partial(launch, env={"B": "2"}), env={"A": "1"})
    world.run()
    assert process.result() == {"B": "2"}


@pytest.mark.parametrize(("env", "error", "message"), [
    ({"": "x"}, ValueError, "'' is not a variable name"),
    ({"A=B": "x"}, ValueError, "'A=B' is not a variable name"),
    ({"A": 1}, TypeError, "the value of 'A' must be a str or None"),
    ({1: "x"}, TypeError, "names must be str, not 1"),
    ({"A": "x\0y"}, ValueError, "the value of 'A' contains a NUL"),
    ({"TZ": "Europe/Paris"}, ValueError, r"differs from the world's zone 'UTC'.*World\(tz="),
    ("A=1", TypeError, "must be a mapping"),
])
def test_a_bad_environment_is_refused_naming_the_bad_variable(
        env: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        World(seed=1, env=env)  # type: ignore[arg-type]
    world = World(seed=1)
    with pytest.raises(error, match=message):
        world.spawn(world.host("a"), time.sleep, 0, env=env)  # type: ignore[arg-type]


def test_putenv_and_unsetenv_refuse_bad_names_with_the_real_errors():
    def program() -> list[str]:
        errors = []
        for call in (lambda: os.putenv("A=B", "x"), lambda: os.putenv("", "x"),
                     lambda: os.unsetenv("A=B"), lambda: os.putenv("A", "x\0"),
                     lambda: os.putenv(1, "x")):  # type: ignore[arg-type]
            try:
                call()
            except (OSError, ValueError, TypeError) as error:
                errors.append(repr(error))
        return errors

    assert _result(program) == [
        "ValueError('illegal environment variable name')", "OSError(22, 'Invalid argument')",
        "OSError(22, 'Invalid argument')", "ValueError('embedded null byte')",
        "TypeError('expected str, bytes or os.PathLike object, not int')"]


def test_tzset_with_the_world_zone_is_allowed_and_with_another_zone_fails_loudly():
    def program() -> int:
        os.environ["TZ"] = "UTC"
        time.tzset()
        os.environ["TZ"] = "Asia/Tokyo"
        time.tzset()
        return time.localtime(0).tm_hour

    world = World(seed=1)
    world.spawn(world.host("a"), program)
    with pytest.raises(SimulationEscape, match=r"time.tzset\(\) with TZ='Asia/Tokyo'"):
        world.run()


def test_a_replay_token_rebuilds_the_world_environment_and_zone():
    from simfs._replay import world_from_token, world_token

    world = World(seed=3, env={"RANK": "0", "LANG": None}, tz="Europe/Berlin")
    world.host("a")
    rebuilt = world_from_token(world_token(world))
    assert (rebuilt.env, rebuilt.tz) == ({"RANK": "0", "LANG": None}, "Europe/Berlin")
    assert rebuilt.environment("a") == world.environment("a")
