"""The simfs pytest plugin, run inside pytester sessions as a user's suite would get it.

Nothing here registers the plugin: pytester's sessions load it through the
package's pytest11 entry point, which is what "no conftest needed" means.
"""

import re
import subprocess
import sys

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


def test_a_failure_reports_the_seed_the_mounts_the_trace_tail_and_a_replay_command(pytester):
    pytester.makepyfile(test_fixture=FIXTURE_TESTS)
    result = pytester.runpytest("-k", "test_fails")
    result.assert_outcomes(failed=1)
    seed = seed_for("test_fixture.py::test_fails")
    result.stdout.fnmatch_lines([
        "*- simfs -*",
        f"seed: {seed}   virtual time: 0.000000 s*",
        "hosts:",
        "  trainer  mount 'vers=3,acdirmin=3,acdirmax=3'",
        "last 20 trace events:",
        "*trainer*make_checkpoint*mkdir /shared/ckpt -> ok*",
        f"replay: pytest test_fixture.py::test_fails --simfs-seed {seed}",
    ])


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
