"""The one exception hierarchy of simfs.

Errors name the object at fault, say what is wrong and what is allowed,
and subclass the builtin a user would catch (``ValueError`` for bad
configuration).  Simulated filesystem errors are plain ``OSError``s with
the real ``errno`` and ``strerror``, marked as simulated, exactly as
pyfakefs does, so user code handles them the way it handles real ones.
"""

from __future__ import annotations

import errno as _errno
import os


class SimfsError(Exception):
    """Base class of every error simfs raises about itself or its inputs."""


class MountOptionError(SimfsError, ValueError):
    """An nfs(5) mount option string holds an option simfs cannot honour."""

    def __init__(self, option: str, problem: str, allowed: str) -> None:
        self.option = option
        self.problem = problem
        self.allowed = allowed
        super().__init__(f"mount option {option!r}: {problem}; allowed: {allowed}")


class MountOptionWarning(UserWarning):
    """An nfs(5) option string the kernel accepts but that likely says something else.

    A repeated option (the last one wins) or a minimum attribute timeout above
    its maximum: Linux mounts both without complaint, and so does simfs, but
    neither is usually what the writer meant.
    """


class SharedModuleWarning(UserWarning):
    """Simulated processes used a package that they cannot each have a copy of.

    Each simulated process imports its own copy of the program's pure-Python
    modules; a package that holds extension modules (numpy, torch, pyarrow)
    can be loaded once per interpreter, so its module state is the same
    object in every process, as it never is across real processes.  Warned
    once per package (docs/design.md, "Processes: their own modules").
    """


class FaultPlanError(SimfsError, ValueError):
    """A fault rule that could never fire as written, or names something unknown."""


class ChooserError(SimfsError, ValueError):
    """The schedule chooser returned something that is not a valid choice."""


class ReplayDiverged(SimfsError):
    """A recorded schedule ran out, or no longer fits the run it replays."""


class SimulationEscape(SimfsError):
    """Code inside a simulated process reached outside the simulation.

    Raised inside the process *and* re-raised by ``World.run()`` at the end,
    so code that swallows it (``except Exception: pass``) still fails loudly.
    """

    def __init__(self, process: str, host: str, what: str) -> None:
        self.process = process
        self.host = host
        self.what = what
        super().__init__(
            f"process {process!r} on host {host!r} escaped the simulation: {what}"
        )


class BlockedOutsideSimulation(SimfsError):
    """A simulated process stopped yielding: it waits on something real."""

    def __init__(self, process: str, host: str, last_call: str, seconds: float) -> None:
        self.process = process
        self.host = host
        self.last_call = last_call
        super().__init__(
            f"process {process!r} on host {host!r} has not yielded to the simulation "
            f"for {seconds:g} s of real time (last simulated call: {last_call}); it is "
            "blocked on something real: a lock, queue or socket created outside the "
            "world, a subprocess, or a C extension's own wait. Create locks and queues "
            "inside the simulated process, or raise World(step_timeout=...) for long "
            "pure computations."
        )


class Deadlock(SimfsError):
    """Nothing can run and no timer is pending, yet processes have not finished."""

    def __init__(self, blocked: list[str]) -> None:
        self.blocked = blocked
        super().__init__(
            "simulation deadlocked: nothing is runnable and no timer is pending; blocked: "
            + "; ".join(blocked)
        )


class ProcessFailed(SimfsError):
    """Processes raised exceptions that nobody asked for: ``World.run()`` reports them.

    A process whose callable raises ends quietly inside the world, the way a
    crashed job on one host does not stop the others; ``run()`` then raises
    this, naming each failed process, its host and what it raised, so a
    failure cannot pass unseen.  ``run(check=False)`` leaves them to
    ``Process.result()`` / ``Process.exception()``.

    Attributes:
        failures: ``(process name, host name, exception)`` per failed process,
            in the order they were spawned.
    """

    def __init__(self, failures: list[tuple[str, str, BaseException]]) -> None:
        self.failures = failures
        lines = [f"process {name!r} on host {host!r} {_outcome(error)}"
                 for name, host, error in failures]
        super().__init__(
            f"{len(failures)} simulated process(es) failed (pass run(check=False) when a "
            "failure is the expected outcome):\n  " + "\n  ".join(lines))


def _outcome(error: BaseException) -> str:
    """What a failed process did, in words: its exit status, or what it raised."""
    if isinstance(error, SystemExit):
        code = error.code
        if isinstance(code, int):
            return f"exited with status {int(code)} (sys.exit({code!r}))"
        return f"exited with status 1 (sys.exit({code!r}))"
    return f"raised {type(error).__name__}: {error}"


class RunawaySimulation(SimfsError):
    """A run recorded more trace events than its limit: most likely a loop that
    polls for something that will never happen, with no ``until`` to stop it."""


class ProcessNotFinished(SimfsError):
    """``Process.result()`` was asked for before the process ended."""


class StoreError(SimfsError):
    """The real disk under ``World(store=)`` failed a write (a full disk's
    ``ENOSPC``, ``EIO``), or the store would pass ``store_size``.

    Not an ``OSError``: the program under test must never take the real
    disk's error for a simulated one.  Raised inside the process whose WRITE
    met it *and* re-raised by ``World.run()`` at the end, as a
    ``SimulationEscape`` is; the simulated file is left as it was before
    that WRITE.
    """


class HostCrashed(SimfsError):
    """The process's host crashed (a fault plan's ``HostCrash``) before it finished."""


class ProcessKilled(BaseException):
    """Unwinds a process the world is tearing down.

    A ``BaseException`` so that ``except Exception`` in user code cannot stop
    the teardown, as ``SystemExit`` does for ``sys.exit``.
    """


# os.strerror's text per errno, looked up once: a poll builds one ENOENT per stat.
_STRERROR: dict[int, str] = {}


def simulated_oserror(code: int, path: str | bytes | int | None = None,
                      path2: str | bytes | None = None) -> OSError:
    """An ``OSError`` of the right subclass, reading exactly as the real one.

    ``path`` is an int where the real call names a descriptor by its number.

    Code matches on the text (``[Errno 2] No such file or directory: ''``),
    so the text is the real one; that the error was simulated shows in the
    trace and in the ``simfs_simulated`` attribute.
    """
    message = _STRERROR.get(code)
    if message is None:
        message = _STRERROR[code] = os.strerror(code)
    if path2 is not None:
        error = OSError(code, message, path, None, path2)
    elif path is not None:
        error = OSError(code, message, path)
    else:
        error = OSError(code, message)
    error.simfs_simulated = True  # type: ignore[attr-defined]
    return error


def errno_name(code: int) -> str:
    """``ENOENT`` for 2; the number itself for codes the platform does not name."""
    return _errno.errorcode.get(code, str(code))
