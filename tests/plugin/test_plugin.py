"""The simfs pytest plugin, run inside pytester sessions as a user's suite would get it.

Nothing here registers the plugin: pytester's sessions load it through the
package's pytest11 entry point, which is what "no conftest needed" means.
"""

import re
import subprocess
import sys

import pytest

from simfs._pytest_plugin import seed_for

FIXTURE_TESTS = """
import os

def make_checkpoint_dir(path):
    os.mkdir(path)

def test_seed(world):
    print("SEED", world.seed)

def test_fails(world):
    world.host("trainer", mount="vers=3,acdirmin=3,acdirmax=3")
    world.spawn("trainer", make_checkpoint_dir, "/shared/ckpt")
    world.run()
    assert False, "the checkpoint is not there"
"""

EXPLORED_TEST = """
import os, time
from simfs.strategies import explore, mount_options

def publish(path):
    time.sleep(0.5)
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY))

def wait_for(path):
    start = time.time()
    while not os.path.exists(path):
        time.sleep(0.1)
    return time.time() - start

@explore(hosts={"a": "vers=3", "b": mount_options()}, max_examples=20)
def test_the_marker_is_seen_within_a_second(world):
    world.spawn("a", publish, "/shared/m")
    waiter = world.spawn("b", wait_for, "/shared/m")
    world.run(until=100)
    print("RAN", world.now, world.choices)
    assert waiter.result() < 1
"""


def test_the_world_fixture_seeds_from_the_test_id_without_any_conftest(pytester):
    pytester.makepyfile(test_fixture=FIXTURE_TESTS)
    result = pytester.runpytest("-s", "-k", "test_seed")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"*SEED {seed_for('test_fixture.py::test_seed')}*"])


def test_simfs_seed_sets_the_seed_of_every_world_fixture(pytester):
    pytester.makepyfile(test_fixture=FIXTURE_TESTS)
    result = pytester.runpytest("-s", "-k", "test_seed", "--simfs-seed", "7")
    result.stdout.fnmatch_lines(["*SEED 7*"])


def test_a_failure_in_the_test_body_reports_the_seed_the_mounts_the_trace_tail_and_replay(
        pytester):
    pytester.makepyfile(test_fixture=FIXTURE_TESTS)
    result = pytester.runpytest("-k", "test_fails")
    result.assert_outcomes(failed=1)
    seed = seed_for("test_fixture.py::test_fails")
    result.stdout.fnmatch_lines([
        "*- simfs -*",
        "no simulated process failed; the test itself did, at 0.000000 s (virtual)",
        f"seed {seed}; hosts: trainer 'vers=3,acdirmin=3,acdirmax=3'",
        "the trace's last 10 events:",
        "*trainer*make_checkpoint*mkdir /shared/ckpt -> ok*",
        f"replay: pytest test_fixture.py::test_fails --simfs-seed {seed}",
        "(every trace event: --simfs-full-trace)",
    ])


ENOTEMPTY_TESTS = """
import os, shutil, time

def save():
    os.makedirs("/shared/ckpt/1")
    with open("/shared/ckpt/1/weights", "w") as f:
        f.write("w")

def evaluate():
    with open("/shared/ckpt/1/weights") as f:
        time.sleep(10)

def prune():
    time.sleep(3)
    shutil.rmtree("/shared/ckpt/1")

def watch():
    for _ in range(600):
        os.path.exists("/shared/ckpt/latest")
        time.sleep(1)

def test_prune(world):
    world.spawn(world.host("a"), save)
    world.host("b")
    world.run()
    world.spawn("a", evaluate)
    world.spawn("a", prune)
    world.spawn("b", watch)
    world.run()
"""


def test_a_process_failure_reports_that_process_at_its_failing_instant_and_the_nfs_holder(
        pytester):
    # The report showed the last 20 events of the run (b's polls at 591-600 s),
    # not the rmtree that failed at 3 s, and no word of the .nfs file.
    pytester.makepyfile(test_prune=ENOTEMPTY_TESTS)
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    section = result.stdout.str().split("- simfs -")[1]
    lines = section.splitlines()
    assert lines[1:3] == [
        "failed: process 'prune' on host 'a' (mount 'vers=3', kernel 6.1)",
        "  OSError: [Errno 39] Directory not empty: '/shared/ckpt/1'"]
    assert "'prune' on a, up to 3.000000 s:" in lines
    assert any("rmdir /shared/ckpt/1 -> ENOTEMPTY" in line for line in lines)
    assert not any("watch" in line for line in lines)  # b's polls are not the failure
    assert "/shared/ckpt/1 at 3.000 s: server says present" in lines
    holder = [line for line in lines if "/shared/ckpt/1/.nfs" in line]
    assert len(holder) == 1 and "held open on host 'a'" in holder[0], section
    # simfs's own frames are hidden from the traceback; the user's are not.
    output = result.stdout.str()
    assert "simfs/_" not in output.split("- simfs -")[0]
    assert "def prune():" in output


def test_simfs_full_trace_shows_every_event_and_simfs_frames(pytester):
    pytester.makepyfile(test_prune=ENOTEMPTY_TESTS)
    result = pytester.runpytest("--simfs-full-trace")
    output = result.stdout.str()
    assert "full trace (" in output and "watch" in output.split("- simfs -")[1]
    assert "simfs/_world.py" in output.split("- simfs -")[0]


def _replay_token(output):
    tokens = re.findall(r"--simfs-replay (simfs1-[A-Za-z0-9_-]+)", output)
    assert tokens, output
    return tokens[-1]


def test_explore_finds_the_stale_marker_and_its_token_replays_the_same_world_once(pytester):
    pytester.makepyfile(test_explored=EXPLORED_TEST)
    found = pytester.runpytest("-s")
    found.assert_outcomes(failed=1)
    output = found.stdout.str()
    ran = re.findall(r"RAN (\S+) (\[.*\])", output)
    token = _replay_token(output)
    replayed = pytester.runpytest("-s", "--simfs-replay", token)
    replayed.assert_outcomes(failed=1)
    # One run, on the minimal world the search ended with: same time, same schedule.
    assert re.findall(r"RAN (\S+) (\[.*\])", replayed.stdout.str()) == [ran[-1]]
    assert "Falsifying example" not in replayed.stdout.str()
    assert _replay_token(replayed.stdout.str()) == token


@pytest.mark.parametrize("explain", [False, True])
def test_explore_runs_hypothesis_explain_phase_only_when_asked(pytester, explain):
    # The phase traces every line of every shrinking example (sys.settrace,
    # sys.monitoring on 3.12+): off by default, it costs the README's search
    # 2.6-3.6x its time; its mark in the report is the "Explanation" block.
    # Derandomized: which lines the phase reports depends on the passing
    # examples seen before the failure, so a random search sometimes has none.
    asked = ", explain=True" if explain else ""
    settled = "hypothesis_settings=settings(derandomize=True, database=None)"
    source = EXPLORED_TEST.replace("from simfs.strategies import",
                                   "from hypothesis import settings\nfrom simfs.strategies import")
    pytester.makepyfile(test_explored=source.replace("max_examples=20",
                                                     f"max_examples=20, {settled}{asked}"))
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    assert ("These lines were always and only run by failing" in result.stdout.str()) is explain


def test_explore_refuses_an_explain_that_is_not_a_bool():
    from simfs.strategies import explore

    with pytest.raises(TypeError, match=r"explain='yes'.*True or False"):
        explore(explain="yes")


def test_a_damaged_replay_token_is_a_usage_error_naming_it(pytester):
    pytester.makepyfile(test_fixture=FIXTURE_TESTS)
    result = pytester.runpytest("--simfs-replay", "simfs1-notatoken")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*--simfs-replay*simfs1-notatoken*damaged*"])


def test_importing_simfs_imports_neither_pytest_nor_hypothesis():
    code = ("import sys, simfs; "
            "print(sorted(m for m in ('pytest', 'hypothesis') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


ORDER_TESTS = """
import os
from simfs.strategies import explore

def make_step(world):
    print("SETUP hosts", sorted(world.hosts))
    world.server.mkdir("/shared/step")

@explore(hosts={"a": "vers=3", "b": "vers=3"}, setup=make_step, max_examples=3)
def test_order(world):
    print("BODY hosts", sorted(world.hosts), world.server.exists("/shared/step"))
"""


def test_explore_setup_runs_before_any_host_mounts_and_the_body_after_all_of_them(pytester):
    pytester.makepyfile(test_order=ORDER_TESTS)
    result = pytester.runpytest("-s")
    result.assert_outcomes(passed=1)
    output = result.stdout.str()
    assert output.count("SETUP hosts []") == output.count("BODY hosts ['a', 'b'] True") >= 1


def test_a_setup_that_is_not_callable_is_refused_naming_it():
    import pytest

    from simfs.strategies import explore

    with pytest.raises(TypeError, match=r"setup must be a callable taking the world, not '/sh"):
        explore(setup="/shared/step")  # type: ignore[arg-type]


REPLAY_SCOPE_TESTS = EXPLORED_TEST + """

def test_fixture(world):
    world.host("a")
    print("FIXTURE ran with hosts", sorted(world.hosts))

@explore(hosts={"x": "vers=3"}, max_examples=2)
def test_other_hosts(world):
    print("OTHER ran with hosts", sorted(world.hosts))
"""


def test_a_replay_token_applies_only_to_the_test_it_belongs_to(pytester):
    pytester.makepyfile(test_explored=REPLAY_SCOPE_TESTS)
    found = pytester.runpytest("-s", "-k", "within_a_second")
    token = _replay_token(found.stdout.str())
    replayed = pytester.runpytest("-s", "--simfs-replay", token)
    # Before: the fixture test failed ("host 'a' already exists") and the
    # other explored test raised KeyError: 'x'.
    replayed.assert_outcomes(failed=1, passed=2)
    output = replayed.stdout.str()
    assert "FIXTURE ran with hosts ['a']" in output
    assert "OTHER ran with hosts ['x']" in output
    assert "FAILED test_explored.py::test_the_marker_is_seen_within_a_second" in output


def test_a_replay_token_of_a_test_the_session_does_not_run_is_a_usage_error_naming_it(
        pytester):
    pytester.makepyfile(test_explored=REPLAY_SCOPE_TESTS)
    token = _replay_token(pytester.runpytest("-k", "within_a_second").stdout.str())
    result = pytester.runpytest("-k", "test_fixture", "--simfs-replay", token)
    assert result.ret == 4
    result.stderr.fnmatch_lines([
        "*--simfs-replay: the token belongs to "
        "test_explored.py::test_the_marker_is_seen_within_a_second, which this session does "
        "not run; run: pytest test_explored.py::test_the_marker_is_seen_within_a_second "
        "--simfs-replay simfs1-*"])


def test_a_replay_token_with_other_hosts_than_the_test_is_refused_naming_both(pytester):
    from simfs import World
    from simfs._replay import world_token

    made = World(3)
    made.host("x")
    token = world_token(made)  # made outside pytest: it names no test
    made.close()
    pytester.makepyfile(test_explored=EXPLORED_TEST)
    result = pytester.runpytest("--simfs-replay", token)
    result.assert_outcomes(failed=1)
    assert ("ReplayTokenError: replay token 'simfs1-" in result.stdout.str())
    assert ("... does not fit this test: it holds hosts ['x'], this test explores ['a', 'b']"
            in result.stdout.str())


SEEDED_EXPLORE = """
from simfs.strategies import explore

@explore(max_examples=5)
def test_seeds(world, tmp_path):
    print("SEED", world.seed, tmp_path.is_dir())
"""


def test_simfs_seed_fixes_the_seed_of_every_explored_example(pytester):
    pytester.makepyfile(test_seeded=SEEDED_EXPLORE)
    result = pytester.runpytest("-s", "--simfs-seed", "7")
    result.assert_outcomes(passed=1)
    seeds = re.findall(r"SEED (\d+)", result.stdout.str())
    assert seeds and set(seeds) == {"7"}


def test_explore_takes_a_function_scoped_fixture_such_as_tmp_path(pytester):
    # Hypothesis's function_scoped_fixture health check failed this test;
    # the fixture is made once for the test and shared by its examples.
    pytester.makepyfile(test_seeded=SEEDED_EXPLORE)
    result = pytester.runpytest("-s")
    result.assert_outcomes(passed=1)
    assert "SEED 0 True" in result.stdout.str()


def test_a_negative_simfs_seed_is_a_usage_error_as_the_clis_seed_is(pytester):
    pytester.makepyfile(test_seeded=SEEDED_EXPLORE)
    result = pytester.runpytest("--simfs-seed", "-1")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*--simfs-seed -1: allowed: an int >= 0*"])
