"""Each simulated process has its own modules and interpreter state, as a real process does.

The seed case: pods of an inference service racing to fill one model cache
on a shared volume keep a module-level lock and memo.  Real pods are
separate interpreters; sharing one ``sys.modules`` made them coordinate
through those objects and hid the race.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import pytest

from simfs import SharedModuleWarning, World

from .helpers import run_alone
from .podcache import cache


def test_each_pod_has_its_own_module_level_lock_and_memo():
    w = World(seed=3)
    hosts = [w.host("a"), w.host("b")]
    pods = [w.spawn(hosts[i % 2], cache.pod, "model.bin", "/shared") for i in range(4)]
    w.run()
    results = [pod.result() for pod in pods]
    assert len({lock for _, _, lock in results}) == 4
    assert all(memo == 1 for _, memo, _ in results)
    assert id(cache._lock) not in {lock for _, _, lock in results}
    assert cache._memo == {} and cache.downloads == []  # the test's own copy is untouched


def test_a_process_started_later_does_not_see_an_earlier_process_memo():
    w = World(seed=1)
    a = w.host("a")
    first = run_alone(w, a, cache.pod, "m", "/shared")
    second = run_alone(w, a, cache.pod, "m", "/shared")
    assert first[0] == 1  # downloaded it
    assert second[0] == 0  # found the file on the export, not in a memo


def test_sharing_the_test_modules_is_an_option_and_then_processes_see_each_other():
    w = World(seed=1, per_process_modules=False)
    a = w.host("a")
    try:
        run_alone(w, a, cache.pod, "m", "/shared")
        second = run_alone(w, a, cache.pod, "m", "/shared")
        assert second[0] == 1 and second[1] == 1  # the first process's download and memo
        assert cache._memo == {"m": "/shared/m"}
    finally:
        cache._memo.clear()
        cache.downloads.clear()


def test_threads_of_one_process_share_its_modules():
    w = World(seed=2)
    assert run_alone(w, w.host("a"), cache.pod_with_a_helper_thread, "m", "/shared") == (1, 1)


def test_a_closure_is_the_test_own_and_shares_the_test_modules_as_pickle_would_refuse_it():
    def body():
        return id(cache._lock)

    w = World(seed=1)
    a = w.host("a")
    assert run_alone(w, a, body) == id(cache._lock)
    assert run_alone(w, a, lambda: id(cache._memo)) == id(cache._memo)


def _lock_id_of(function):
    return id(function.__globals__["_lock"])


def test_a_top_level_function_passed_as_an_argument_is_the_process_own_as_pickle_sends_it():
    w = World(seed=1)
    assert run_alone(w, w.host("a"), _lock_id_of, cache.fetch) != id(cache._lock)


def test_a_target_may_be_named_module_colon_function():
    w = World(seed=1)
    a = w.host("a")
    result = run_alone(w, a, "tests.simfs.podcache.cache:pod", "m", "/shared")
    assert result[:2] == (1, 1) and result[2] != id(cache._lock)


@pytest.mark.parametrize(("target", "words"), [
    ("tests.simfs.podcache.cache.pod", "is not 'package.module:function'"),
    ("tests.simfs.podcache.cache:", "is not 'package.module:function'"),
    ("no.such.module:pod", "no module named 'no.such.module'"),
    ("tests.simfs.podcache.cache:pod:x", "is not 'package.module:function'"),
])
def test_a_target_string_that_names_nothing_is_refused_naming_it(target, words):
    w = World(seed=1)
    with pytest.raises(ValueError, match=words) as raised:
        w.spawn(w.host("a"), target)
    assert repr(target) in str(raised.value)


def test_a_named_function_missing_from_its_module_fails_the_process_naming_it():
    w = World(seed=1)
    process = w.spawn(w.host("a"), "tests.simfs.podcache.cache:no_such_function")
    w.run(check=False)
    error = process.exception()
    assert isinstance(error, LookupError)
    assert "tests.simfs.podcache.cache:no_such_function" in str(error)


def _configure_process(tag):
    logging.basicConfig(level=logging.DEBUG, format=f"{tag} %(message)s")
    sys.argv.append(tag)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    warnings.simplefilter("ignore", DeprecationWarning)
    return (len(logging.getLogger().handlers), sys.argv[-1],
            signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN)


def _fresh_process_state():
    return (len(logging.getLogger().handlers), "extra" in sys.argv,
            signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL,
            signal.getsignal(signal.SIGINT) is signal.default_int_handler,
            signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN)


def test_logging_argv_signals_and_warnings_belong_to_each_process():
    root_handlers = list(logging.getLogger().handlers)
    argv = list(sys.argv)
    usr1 = signal.getsignal(signal.SIGUSR1)
    w = World(seed=1)
    a = w.host("a")
    configured = w.spawn(a, _configure_process, "extra")
    w.run()
    assert configured.result() == (1, "extra", True)
    assert run_alone(w, a, _fresh_process_state) == (0, False, True, True, True)
    assert logging.getLogger().handlers == root_handlers
    assert sys.argv == argv
    assert signal.getsignal(signal.SIGUSR1) == usr1


def _changes_its_interpreter_settings() -> str:
    import contextlib
    import gc
    import io
    import locale
    import socket
    import threading

    sys.path.insert(0, "/only-in-a")
    gc.disable()
    gc.set_threshold(5000)
    socket.setdefaulttimeout(7)
    locale.setlocale(locale.LC_NUMERIC, "C.UTF-8")
    threading.settrace(_ignore)
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        time.sleep(1)  # the other process runs here
        print("a's line")
    return captured.getvalue()


def _reads_its_interpreter_settings() -> tuple[object, ...]:
    import gc
    import io
    import locale
    import socket
    import threading

    time.sleep(0.5)  # inside a's redirect_stdout and after a's changes
    return ("/only-in-a" in sys.path, gc.isenabled(), gc.get_threshold()[0],
            socket.getdefaulttimeout(), isinstance(sys.stdout, io.StringIO),
            locale.setlocale(locale.LC_NUMERIC), threading._trace_hook)  # type: ignore[attr-defined]


def test_sys_path_stdout_the_collector_socket_timeout_and_locale_belong_to_each_process():
    # One interpreter's settings, as each real process has its own: changed
    # in one process they showed in every other (b printed into a's
    # redirect_stdout buffer) and stayed changed in the test after the run
    # (gc disabled, sys.path edited, the C locale set).
    import gc
    import locale
    import socket
    import threading

    def settings() -> tuple[object, ...]:
        return (list(sys.path), gc.isenabled(), gc.get_threshold(), socket.getdefaulttimeout(),
                sys.stdout, locale.setlocale(locale.LC_NUMERIC),
                threading._trace_hook)  # type: ignore[attr-defined]

    before = settings()
    w = World(seed=1)
    a = w.spawn(w.host("a"), _changes_its_interpreter_settings)
    b = w.spawn(w.host("b"), _reads_its_interpreter_settings)
    w.run()
    assert a.result() == "a's line\n"
    assert b.result() == (False, before[1], before[2][0], before[3], False, before[5],
                          before[6])
    assert settings() == before


def _ignore(*args: object) -> None:
    """The hook process a sets: it swallows every error."""


def _sets_its_hooks() -> bool:
    import threading

    sys.excepthook = sys.unraisablehook = threading.excepthook = _ignore
    sys.dont_write_bytecode = not sys.dont_write_bytecode
    time.sleep(1)  # the other process runs here
    return sys.excepthook is _ignore


def _reads_its_hooks() -> tuple[str, ...]:
    import threading

    time.sleep(0.5)
    return tuple(getattr(hook, "__name__", repr(hook)) for hook in
                 (sys.excepthook, sys.unraisablehook, threading.excepthook))


def test_hooks_a_program_sets_by_assignment_belong_to_its_process():
    # sys.excepthook = ... in one process silenced every other process's
    # uncaught errors, and the test's own after the run.
    import threading

    before = (sys.excepthook, sys.unraisablehook, threading.excepthook, sys.dont_write_bytecode)
    w = World(seed=1)
    a = w.spawn(w.host("a"), _sets_its_hooks)
    b = w.spawn(w.host("b"), _reads_its_hooks)
    w.run()
    assert a.result() is True
    assert "_ignore" not in b.result()
    assert (sys.excepthook, sys.unraisablehook, threading.excepthook,
            sys.dont_write_bytecode) == before


def _set_a_handler_from_a_thread():
    import threading

    errors = []

    def thread():
        try:
            signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        except ValueError as error:
            errors.append(str(error))

    worker = threading.Thread(target=thread)
    worker.start()
    worker.join()
    return errors


def test_only_a_process_main_thread_may_set_a_signal_handler_as_in_cpython():
    w = World(seed=1)
    assert run_alone(w, w.host("a"), _set_a_handler_from_a_thread) == [
        "signal only works in main thread of the main interpreter"]


def _register_exit_marker(name):
    import atexit

    atexit.register(lambda: open(f"/shared/{name}", "w").close())
    return "registered"


def test_atexit_handlers_run_inside_the_process_when_it_ends_and_write_the_export():
    w = World(seed=1)
    a, b = w.host("a"), w.host("b")
    assert run_alone(w, a, _register_exit_marker, "bye") == "registered"
    assert w.server.exists("/shared/bye")
    assert run_alone(w, b, lambda: __import__("os").path.exists("/shared/bye")) is True


def _handler_reads_what_a_worker_thread_wrote(name, daemon_sleeper):
    import atexit
    import os
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    def worker():
        time.sleep(1)
        open(f"/shared/{name}", "w").close()

    def report():
        with open(f"/shared/{name}.seen", "w") as seen:
            seen.write(str(os.path.exists(f"/shared/{name}")))

    atexit.register(report)
    threading.Thread(target=worker).start()
    if daemon_sleeper:  # neither is waited for, as in CPython
        threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
        pool = ThreadPoolExecutor(1)  # left idle, never shut down
        assert pool.submit(lambda: 1).result() == 1
    return "main returned"


@pytest.mark.parametrize("daemon_sleeper", [False, True])
def test_atexit_handlers_run_after_the_process_s_other_non_daemon_threads_end(
        daemon_sleeper):
    # CPython joins every non-daemon thread (threading._shutdown) before
    # Py_FinalizeEx runs the atexit handlers: run as a script with python3
    # 3.11 on Linux, the same program's handler saw the worker's file.  The
    # handlers ran as soon as the main function returned and saw nothing.
    w = World(seed=1)
    result = run_alone(w, w.host("a"), _handler_reads_what_a_worker_thread_wrote, "done",
                       daemon_sleeper)
    assert result == "main returned"
    assert w.server.read_text("/shared/done.seen") == "True"


def _log_a_line_with_its_time():
    import io
    import logging

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    logger = logging.getLogger("timed")
    logger.addHandler(handler)
    logger.warning("saved")
    return stream.getvalue()


def test_a_log_line_with_its_time_is_written_inside_a_process():
    # logging.Formatter's class body says converter = time.localtime: in the
    # process's own copy of logging that is the route, which an instance
    # bound (self.converter(t) passed self: "localtime() takes at most 1
    # argument (2 given)", swallowed by logging, the line lost).
    w = World(seed=1)
    assert run_alone(w, w.host("a"), _log_a_line_with_its_time) == \
        "2026-01-01 00:00:00,000 saved\n"


_CLOCKS = """
import time
from time import localtime


class Clocks:
    monotonic = time.monotonic
    local = localtime
    sleep = time.sleep

    def read(self):
        self.sleep(2)
        return self.monotonic(), self.local(0).tm_year


def read():
    return Clocks().read()
"""


@pytest.mark.parametrize("per_process_modules", [True, False])
def test_a_class_made_after_the_routes_holds_them_as_it_held_the_builtins(
        tmp_path, monkeypatch, per_process_modules):
    # A builtin stored in a class is not bound by its instances; a route made
    # after the routes went in (a process's own copy, or the test's module
    # imported after the first World) must not be either.
    World()  # the routes are in before the module below is imported
    (tmp_path / "clocks_after_routes.py").write_text(_CLOCKS)
    monkeypatch.syspath_prepend(str(tmp_path))
    import clocks_after_routes

    assert clocks_after_routes.Clocks.local is time.localtime
    w = World(seed=1, per_process_modules=per_process_modules)
    reader = w.spawn(w.host("a"), "clocks_after_routes:read")
    w.run()
    started, year = reader.result()
    assert (year, started >= 2) == (1970, True)


def test_a_package_with_extension_modules_is_shared_and_said_so():
    from .podcache import numeric  # here: every process of this file copies its imports

    w = World(seed=1)
    process = w.spawn(w.host("a"), numeric.total, 3)
    with pytest.warns(SharedModuleWarning, match="'numpy'"):
        w.run()
    assert process.result() == 3
    assert "numpy" in process.shared_modules


def test_a_pure_python_package_the_world_shares_is_said_to_be_named_not_compiled(
        tmp_path, monkeypatch):
    # The warning gives the reason the package is shared; it said "it holds
    # extension modules" for a pure-Python package the test itself named.
    (tmp_path / "memo_shared.py").write_text("seen = []\n")
    (tmp_path / "memo_user.py").write_text(textwrap.dedent("""
        import memo_shared

        def note(tag):
            memo_shared.seen.append(tag)
            return len(memo_shared.seen)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    import memo_user

    w = World(seed=1, shared_modules=["memo_shared"])
    first = w.spawn(w.host("a"), memo_user.note, "a")
    with pytest.warns(SharedModuleWarning) as caught:
        w.run()
    (message,) = [str(w.message) for w in caught if "'memo_shared'" in str(w.message)]
    assert "'memo_shared': World(shared_modules=...) names it, so" in message
    assert "extension" not in message
    assert first.result() == 1


def test_a_submodule_the_world_shares_is_said_to_be_shared_too(tmp_path, monkeypatch):
    # Its package is the program's own (a copy per process), the submodule
    # one copy for all: that sharing went unsaid.
    (tmp_path / "memo_pkg").mkdir()
    (tmp_path / "memo_pkg" / "__init__.py").write_text("")
    (tmp_path / "memo_pkg" / "kept.py").write_text("seen = []\n")
    (tmp_path / "memo_pkg_user.py").write_text(textwrap.dedent("""
        from memo_pkg import kept

        def note(tag):
            kept.seen.append(tag)
            return len(kept.seen)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    import memo_pkg_user

    w = World(seed=1, shared_modules=["memo_pkg.kept"])
    w.spawn(w.host("a"), memo_pkg_user.note, "a")
    with pytest.warns(SharedModuleWarning) as caught:
        w.run()
    messages = [str(w.message) for w in caught if "memo_pkg" in str(w.message)]
    assert messages == [
        messages[0]] and "'memo_pkg.kept': World(shared_modules=...) names it" in messages[0]


def _imports_then_sleeps(name):
    module = __import__(name)
    time.sleep(0.001)
    return module.X


def _spins_then_sleeps():
    for _ in range(50):
        os.path.exists("/shared/x")
    time.sleep(1)
    return "done"


def test_a_package_first_seen_while_the_baton_is_handed_on_does_not_derail_the_run(
        tmp_path, monkeypatch):
    # Handing the baton on, a process's newly imported package is classified
    # (per process or shared) by looking at its files; those looks went
    # through the routes, each a yield to the scheduler in the middle of the
    # hand-over: with two other processes runnable the importer was marked
    # running, never resumed, and the run ended in a Deadlock naming it
    # (found with zarr, whose threads import lazily).
    from simfs._engine import _modules

    name = "pkg_first_seen_at_a_handover"
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("X = 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(_modules._top_verdicts, name, raising=False)
    w = World(seed=0)
    importer = w.spawn(w.host("a"), _imports_then_sleeps, name)
    spinners = [w.spawn(w.host(host), _spins_then_sleeps) for host in ("b", "c")]
    w.run()
    assert importer.result() == 7
    assert [p.result() for p in spinners] == ["done", "done"]
    sys.modules.pop(name, None)


def test_a_script_function_runs_in_the_script_copy_imported_as_mp_main(tmp_path):
    script = tmp_path / "pods.py"
    script.write_text(textwrap.dedent("""
        import simfs
        seen = []

        def pod(tag):
            seen.append(tag)
            return list(seen)

        if __name__ == "__main__":
            w = simfs.World(seed=1)
            a = w.host("a")
            ps = [w.spawn(a, pod, tag) for tag in "xy"]
            w.run()
            print([p.result() for p in ps], seen)
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[['x'], ['y']] []"


def test_a_script_is_compiled_once_for_all_its_processes_and_each_runs_its_own_body(tmp_path):
    # A script has no .pyc: its copy for each process was compiled again
    # (half the cost of a small world).  CPython raises the "compile" audit
    # event for each compile of its source.
    script = tmp_path / "pods.py"
    script.write_text(textwrap.dedent("""
        import sys
        import simfs
        body_runs = []
        body_runs.append(1)

        def pod():
            return len(body_runs)

        if __name__ == "__main__":
            compiles = []
            sys.addaudithook(lambda event, args: compiles.append(args[1])
                             if event == "compile" and args[1] == __file__ else None)
            w = simfs.World(seed=1)
            ps = [w.spawn(w.host(h), pod) for h in "abc"]
            w.run()
            print([p.result() for p in ps], len(compiles))
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[1, 1, 1] 1"


def test_a_script_read_from_stdin_runs_its_function_as_one_from_python_c_does():
    # '<stdin>' is no file to import again as __mp_main__: its objects are
    # the test's own, shared, as for ``python -c`` (it failed with an ImportError).
    script = textwrap.dedent("""
        import simfs

        def pod():
            return 5

        w = simfs.World(seed=1)
        p = w.spawn(w.host("a"), pod)
        w.run()
        print(p.result())
    """)
    done = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "5"


def test_a_script_that_builds_its_world_unguarded_is_told_why_its_process_fails(tmp_path):
    # The process imports its own copy of the script (as multiprocessing's
    # spawn does), which runs the top level again: a world inside a process.
    script = tmp_path / "unguarded.py"
    script.write_text(textwrap.dedent("""
        import simfs

        def pod():
            return 1

        w = simfs.World(seed=1)
        w.spawn(w.host("a"), pod)
        w.run()
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode != 0
    assert "World.run() was called inside simulated process 'pod'" in done.stderr
    assert 'if __name__ == "__main__":' in done.stderr


_FIRST_NUMPY_INSIDE = """
import simfs

def body():
    import numpy  # its first import in this interpreter, inside a process
    return int(numpy.arange(4).sum())

if __name__ == "__main__":
    w = simfs.World(seed=1, step_timeout=30)
    p = w.spawn(w.host("a"), body)
    w.run()
    print(p.result())
"""


def test_a_library_routed_at_import_can_be_imported_first_inside_a_process(tmp_path):
    # numpy is routed right after its body runs (_patch/_imports.py's loader);
    # run with routing off, its nested imports took Python's module locks under
    # the real thread id while the outer import held them under the process's.
    script = tmp_path / "first_numpy.py"
    script.write_text(_FIRST_NUMPY_INSIDE)
    done = subprocess.run([sys.executable, "-W", "ignore", str(script)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "6"


def _warn_three_times_while_another_process_runs():
    import time

    time.sleep(0.05)  # both processes have started (and imported what they import)
    with warnings.catch_warnings(record=True) as shown:
        for _ in range(3):
            warnings.warn("the cache is cold", UserWarning, stacklevel=1)
            time.sleep(0.1)  # the other process runs between two warnings
    return [str(warning.message) for warning in shown]


def _sleep_three_times():
    import time

    for _ in range(3):
        time.sleep(0.1)


def test_a_default_warning_shows_once_though_another_process_ran_between_its_calls():
    # The default action shows a warning once per place (Python's warnings
    # docs, "The Warnings Filter"); handing the baton to a process whose
    # filters are the same must not make the registry forget it was shown.
    w = World(seed=1)
    a, b = w.host("a"), w.host("b")
    warner = w.spawn(a, _warn_three_times_while_another_process_runs)
    w.spawn(b, _sleep_three_times)
    w.run()
    assert warner.result() == ["the cache is cold"]
