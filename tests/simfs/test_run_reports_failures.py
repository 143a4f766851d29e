"""World.run() reports processes that raised, naming each one, its host and the error."""

import time

import pytest

from simfs import FaultPlan, HostCrash, HostCrashed, ProcessFailed, SimfsError, World, posix


def _removes_a_missing_dir():
    posix.rmdir("/shared/absent")


def _sleeps_then_raises(seconds, message):
    time.sleep(seconds)
    raise RuntimeError(message)


def _returns(value):
    return value


def test_a_process_that_raises_makes_run_raise_naming_process_host_and_exception():
    world = World()
    world.spawn(world.host("trainer"), _returns, 1)
    world.spawn(world.host("consumer"), _removes_a_missing_dir, name="cleanup")
    with pytest.raises(ProcessFailed) as raised:
        world.run()
    message = str(raised.value)
    assert "process 'cleanup' on host 'consumer' raised FileNotFoundError" in message
    assert "/shared/absent" in message and "check=False" in message
    ((name, host, error),) = raised.value.failures
    assert (name, host) == ("cleanup", "consumer")
    assert isinstance(error, FileNotFoundError) and raised.value.__cause__ is error
    assert isinstance(raised.value, SimfsError)


def test_every_failed_process_is_listed_in_spawn_order():
    world = World()
    host = world.host("a")
    world.spawn(host, _sleeps_then_raises, 2.0, "second", name="late")
    world.spawn(host, _sleeps_then_raises, 1.0, "first", name="early")
    with pytest.raises(ProcessFailed) as raised:
        world.run()
    assert [(name, str(error)) for name, _, error in raised.value.failures] == [
        ("late", "second"), ("early", "first")]


def test_check_false_leaves_the_failure_to_process_exception():
    world = World()
    process = world.spawn(world.host("a"), _removes_a_missing_dir)
    world.run(check=False)
    assert isinstance(process.exception(), FileNotFoundError)
    with pytest.raises(FileNotFoundError):
        process.result()


def test_a_failure_is_reported_by_the_run_it_happened_in_and_only_once():
    world = World()
    host = world.host("a")
    world.spawn(host, _sleeps_then_raises, 1.0, "boom", name="failing")
    world.spawn(host, _sleeps_then_raises, 5.0, "later", name="slow")
    with pytest.raises(ProcessFailed) as first:
        world.run(until=2.0)
    assert [name for name, _, _ in first.value.failures] == ["failing"]
    with pytest.raises(ProcessFailed) as second:
        world.run()
    assert [name for name, _, _ in second.value.failures] == ["slow"]
    world.run()  # nothing new failed


def test_a_failure_seen_under_check_false_is_not_reported_by_a_later_run():
    world = World()
    host = world.host("a")
    world.spawn(host, _sleeps_then_raises, 1.0, "boom")
    world.spawn(host, _returns, 2)
    world.run(until=2.0, check=False)
    world.run()


def test_a_process_that_catches_its_own_error_is_not_a_failure():
    def tolerant():
        try:
            posix.rmdir("/shared/absent")
        except FileNotFoundError:
            return "handled"

    world = World()
    process = world.spawn(world.host("a"), tolerant)
    world.run()
    assert process.result() == "handled"


def test_a_process_stopped_by_a_host_crash_is_not_a_failure_of_its_own():
    world = World(faults=FaultPlan(crashes=(HostCrash(host="a", at=1.0),)))
    process = world.spawn(world.host("a"), time.sleep, 5.0)
    world.run()
    assert isinstance(process.exception(), HostCrashed)  # for result() to report, not run()


def _raises_in_a_thread():
    import threading

    def save():
        raise ValueError("checkpoint 7 is corrupt")

    thread = threading.Thread(target=save, name="saver")
    thread.start()
    thread.join()
    return "main went on"


def test_an_exception_in_a_user_thread_fails_that_thread_naming_it_and_not_an_escape():
    # It was a SimulationEscape naming simfs/_patch/_threads.py: the default
    # threading.excepthook read source files from the real disk.
    world = World()
    main = world.spawn(world.host("a"), _raises_in_a_thread, name="trainer")
    with pytest.raises(ProcessFailed) as raised:
        world.run()
    ((name, host, error),) = raised.value.failures
    assert (name, host) == ("saver", "a")
    assert isinstance(error, ValueError) and str(error) == "checkpoint 7 is corrupt"
    assert "process 'saver' on host 'a' raised ValueError: checkpoint 7 is corrupt" \
        in str(raised.value)
    assert main.result() == "main went on"  # as in Python, the main thread goes on


def _thread_exits():
    import sys
    import threading

    thread = threading.Thread(target=sys.exit, args=(3,), name="quitter")
    thread.start()
    thread.join()
    return "main went on"


def test_sys_exit_in_a_thread_ends_only_that_thread_quietly_as_in_python():
    world = World()
    main = world.spawn(world.host("a"), _thread_exits)
    world.run()
    assert main.result() == "main went on"


def _exits(code):
    import sys

    sys.exit(code)


@pytest.mark.parametrize("code", [0, None, False], ids=["0", "None", "False"])
def test_sys_exit_with_status_0_is_a_process_that_succeeded(code):
    world = World()
    process = world.spawn(world.host("a"), _exits, code)
    world.run()
    assert process.exception() is None and process.result() is None


@pytest.mark.parametrize(("code", "said"), [
    (3, "exited with status 3 (sys.exit(3))"),
    ("bad config", "exited with status 1 (sys.exit('bad config'))"),
    (True, "exited with status 1 (sys.exit(True))"),
], ids=["3", "message", "True"])
def test_sys_exit_with_another_status_is_a_failure_naming_the_status(code, said):
    world = World()
    world.spawn(world.host("a"), _exits, code, name="job")
    with pytest.raises(ProcessFailed) as raised:
        world.run()
    assert f"process 'job' on host 'a' {said}" in str(raised.value)
    assert isinstance(raised.value.failures[0][2], SystemExit)
