"""A safety net under the routes: real filesystem calls made inside the world.

Routes catch calls made through ``os``, ``open`` and friends; an original
captured some other way (a dict of functions, a closure, a class attribute
we missed, ``io.FileIO`` itself) would still reach the real machine.  CPython
raises audit events from its C implementations of open, scandir, mkdir,
rename and the rest, so an audit hook sees those calls whatever name they
were made through, and turns one made inside a simulated process into a loud
``SimulationEscape`` *before* the call acts (a hook that raises aborts it).

Native code is the other way out.  Measured with safetensors 0.8, blake3 1.0,
numpy 2.4 and sqlite3 inside a run (before these rules): Rust and C file I/O
raises no audit event at all, so ``save_file("model.safetensors")`` wrote the
real working directory and ``run()`` raised nothing.  What CPython *does*
audit, and this hook refuses inside a simulated process:

- ``sqlite3.connect`` of anything but an in-memory database: SQLite locks its
  file with ``fcntl`` on real descriptors, which cannot be simulated honestly;
- ``mmap.__new__`` of a real descriptor (the ``mmap`` route maps simulated
  files itself, see ``_mmap``; anonymous maps are memory, not I/O);
- ``ctypes.dlopen``/``ctypes.dlsym`` (loading a library, resolving a
  function): a foreign call can do any I/O.  CPython 3.11 raises no event
  for the *call* of a function resolved before the run (measured:
  ``ctypes.call_function`` did not fire for ``libc.getpid()``), so such a
  call is caught only by the sentinel working directory, for relative paths.

Native I/O of the packages this project builds on (safetensors, blake3,
numpy) is routed through the simulation by ``_native``; native I/O of any
other extension is caught by the sentinel working directory of ``_boundary``
when it uses a relative path.  An absolute path outside the export written by
unknown native code raises no audit event: only the seccomp guard
(``_native_guard``) catches it.

Reads of code (imports, ``linecache`` for tracebacks, package data under the
interpreter's prefixes and ``sys.path``) are allowed: loading a module is not
the program's I/O.  A relative path is never code (the import system joins
every path with its directory), so ``io.FileIO("cfg.json")`` is refused.
What the import system itself does is allowed wherever it does it: it lists
a package's directory and writes its ``__pycache__`` even in the working
directory, whose other files are the program's input (a program that
imported its own ``mypkg.sub`` for the first time inside a process was
refused for the listing).  The module's own code, run by the import, is the
program's and is checked as ever.  Except inside the export: modules come
from the real machine, so code the program wrote to the simulated export
(a ``sys.path`` entry there, ``spec_from_file_location``, ``py_compile``)
would be looked for on the real disk and silently not found; it is refused
loudly instead, through the import system's events and a ``sys.path_hooks``
entry (its directory check is a stat that raises no event).
"""

from __future__ import annotations

import os
import sys
from typing import Any, NoReturn

from ..._engine._scheduler import Process, current_process
from .._registry import escape
from . import _outside

_READS = frozenset({"os.listdir", "os.scandir"})
_WRITES = frozenset({"os.mkdir", "os.remove", "os.rename", "os.rmdir", "os.link", "os.symlink",
                     "os.chmod", "os.chown", "os.truncate", "os.utime", "os.chdir"})
# The events whose second argument is a path too (the target).
_TWO_PATHS = frozenset({"os.rename", "os.link", "os.symlink"})
_NATIVE = frozenset({"sqlite3.connect", "mmap.__new__", "ctypes.dlopen", "ctypes.dlsym",
                     "ctypes.call_function"})
# A fork inside the world, however os.fork was reached (a name bound before
# the routes, a saved reference): refused before the fork happens.
_FORKS = frozenset({"os.fork", "os.forkpty"})
# The real fcntl module's calls (CPython audits each with the descriptor
# first).  The routes never make one inside a process, so one seen there on a
# simulated descriptor was made through an original captured before the
# routes went in, and would act on the test process's descriptor instead.
_FCNTL = frozenset({"fcntl.fcntl", "fcntl.flock", "fcntl.lockf", "fcntl.ioctl"})
# Every event the hook judges: it is called for every audit event of the
# interpreter (builtins.id on each route lookup among them), so one test.
_JUDGED = frozenset({"open"}) | _READS | _WRITES | _NATIVE | _FORKS | _FCNTL
_CODE_SUFFIXES = (".py", ".pyc", ".so", ".pth", ".pyi", ".typed")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_IN_MEMORY = (":memory:", "file::memory:")
# Where the import system's own frames come from (find_spec's directory
# listings, get_data's reads, the bytecode cache's mkdir and atomic writes).
_IMPORT_SYSTEM = frozenset({"<frozen importlib._bootstrap>",
                            "<frozen importlib._bootstrap_external>"})

# Real descriptors the mmap route maps on purpose (memfd copies of simulated files).
BRIDGED_FDS: set[int] = set()
_real_cwd = os.getcwd()


def _code_roots() -> tuple[str, ...]:
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    # The directory the program was started from is on sys.path under pytest
    # and ``python -m``; its data files are the program's input, not code.
    roots.update(entry for entry in sys.path
                 if entry.startswith("/") and entry.rstrip("/") != _real_cwd)
    return tuple(sorted(root.rstrip("/") + "/" for root in roots))


def _code_read(path: object) -> bool:
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str) or not path.startswith("/"):
        return False
    return path.endswith(_CODE_SUFFIXES) or path.startswith(_code_roots())


def _import_directory(path: object) -> bool:
    """A ``sys.path`` directory, which the import system lists to find modules."""
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    return isinstance(path, str) and path.rstrip("/") in {
        entry.rstrip("/") for entry in sys.path if entry.startswith("/")}


def import_system_call() -> bool:
    """Whether the call an audit hook is judging was made by importlib itself.

    For audit hooks only: the hook's caller is the C function that raised
    the event, and that function's caller is the frame judged here.
    """
    return sys._getframe(2).f_code.co_filename in _IMPORT_SYSTEM


def _native_refusal(event: str, args: tuple[Any, ...]) -> str | None:
    """Why a native call inside the world is refused, or None when it is harmless."""
    if event == "sqlite3.connect":
        database = os.fsdecode(args[0]) if args and isinstance(args[0], str | bytes) else ""
        if database.startswith(_IN_MEMORY) or "mode=memory" in database:
            return None
        return (f"sqlite3.connect({database!r}): SQLite locks its file with fcntl on real "
                "descriptors, which the simulation cannot honestly model; only ':memory:' "
                "databases work inside a simulated process")
    if event == "mmap.__new__":
        fileno = args[0] if args else -1
        if fileno == -1 or fileno in BRIDGED_FDS:
            return None
        return f"mmap.mmap({fileno}, ...) of a real file descriptor"
    if event == "ctypes.dlopen" and args and _loads_code(args[0]):
        return None
    if event == "ctypes.dlsym" and len(args) > 1 and (_python_api(args[0], args[1])
                                                      or args[1] in _THREAD_NAMING):
        return None
    shown = repr(args[0])[:80] if args else ""
    if event == "ctypes.dlsym" and len(args) > 1:
        shown = f"{shown}, {args[1]!r}"
    return (f"{event}({shown}): a foreign function call can do any I/O behind the "
            "simulation's back")


# pthread_{set,get}name_np name an OS thread (no file of the program's): trio
# looks them up in libpthread at import (_core/_thread_cache.py; issue 30).
_THREAD_NAMING = frozenset({"pthread_setname_np", "pthread_getname_np"})


def _loads_code(library: object) -> bool:
    """Whether a ``ctypes.dlopen`` loads code, as an import does, and calls nothing.

    The interpreter itself (None: ``ctypes.pythonapi``, made at ctypes'
    import), a shared library of the installation (torch loads its
    ``libtorch_global_deps.so`` at import), or a library the dynamic linker
    finds by its bare name in the system's directories (trio's
    ``libpthread.so.0``).  What is called in it is resolved by
    ``ctypes.dlsym``, which stays judged.
    """
    if library is None:
        return True
    if isinstance(library, bytes):
        library = os.fsdecode(library)
    return isinstance(library, str) and (
        "/" not in library or (library.startswith("/") and library.startswith(_code_roots())))


def _python_api(library: object, name: object) -> bool:
    """A function of Python's own C API looked up in the interpreter
    (``ctypes.pythonapi.PyBytes_FromStringAndSize``, which fsspec does at
    import; issue 30): no file I/O of its own."""
    return (getattr(library, "_name", 0) is None and isinstance(name, str)
            and name.startswith(("Py", "_Py")))


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event not in _JUDGED:
        return
    process = current_process()
    if process is None:
        if _outside.PREFIXES and (event == "open" or event in _READS or event in _WRITES):
            for path in args[:2] if event in _TWO_PATHS else args[:1]:
                _outside.check(event, path)
        return
    if event in _FORKS:
        raise escape(process, f"{event}() is not simulated: simulated processes are "
                              "spawned by World.spawn, not by the program itself")
    if event in _FCNTL:
        _judge_fcntl(process, event, args)
        return
    if event in _NATIVE:
        why = _native_refusal(event, args)
        if why is not None:
            raise escape(process, why)
        return
    path = args[0] if args else None
    if _in_export(process, path):
        # A real call on the export's path reads the real disk, never the
        # simulated file: the import system's, or a code reader's (io.open_code,
        # runpy.run_path), which the rules below would let through.
        raise escape(process, _importing_from_export(path) if import_system_call() else
                     f"a real {event}({path!r}) ran inside the simulation and would reach "
                     "the real disk, not the simulated export (io.FileIO, an original "
                     "captured before the routes, or a code reader such as io.open_code "
                     "or runpy.run_path: none is simulated)")
    if import_system_call():
        return  # the import system's own call, not the program's
    if event == "open":
        if isinstance(path, int):
            return  # an fdopen of a descriptor the routes already vetted
        flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
        mode = args[1] if len(args) > 1 and isinstance(args[1], str) else "r"
        reading = not flags & _WRITE_FLAGS and not set(mode) & set("wax+")
        if reading and (_code_read(path) or process.syscalls.machine_readable(path)):
            return  # the machine's own files are read-only, and readable
        if reading and _pseudo_filename(path):
            # The parser reading back the line of a SyntaxError in source
            # compiled as '<unknown>' or '<string>' (3.13's traceback parses
            # each line it underlines): the interpreter's, not the program's,
            # and never a file (the real cwd is the sentinel directory).
            return
    elif event in _READS and (_code_read(path) or _import_directory(path)
                              or process.syscalls.machine_readable(path)):
        return
    raise escape(process, f"a real {event}({path!r}) ran inside the simulation (an original "
                          "function captured where simfs could not reroute it)")


def _judge_fcntl(process: Process, event: str, args: tuple[Any, ...]) -> None:
    """Refuse a real ``fcntl`` call on one of the process's simulated descriptors."""
    fd = args[0] if args else None
    if not isinstance(fd, int) or not process.syscalls.owns_fd(fd):
        return
    raise escape(process, f"the real {event}({fd}, ...) was called on descriptor {fd}, a "
                          "simulated file of this process: that function was captured "
                          "before simfs's routes were installed (they go in at the first "
                          "World.spawn or World.run), in a list, a dict, a closure or a "
                          "default argument where simfs cannot rebind it, so it would act "
                          "on the test process's own descriptors, not the simulated file; "
                          f"call {event} through the fcntl module at call time, or capture "
                          "it after the routes are installed")


def _in_export(process: Process, path: object) -> bool:
    """Whether ``path`` (as an audit event or sys.path carries it) names the export."""
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str):
        return False
    prefix = process.syscalls.export_prefix
    return path.startswith(prefix) or path == prefix[:-1]


def _importing_from_export(path: object) -> str:
    return (f"the import system reached {path!r}, inside the simulated export: modules are "
            "loaded from the real machine, so importing or compiling code from the "
            "simulated filesystem is not simulated")


def _export_path_hook(entry: object) -> NoReturn:
    """A ``sys.path_hooks`` entry: refuse a ``sys.path`` entry inside the export.

    The import system checks a directory on sys.path with a stat that
    raises no audit event, so without this a program that put the export
    on sys.path would look its modules up on the real machine and silently
    find none.  Anywhere else the next hook takes the entry.
    """
    process = current_process()
    if process is not None and _in_export(process, entry):
        raise escape(process, _importing_from_export(entry))
    raise ImportError("not a directory of the simulated export")


_installed = False


def install() -> None:
    global _installed
    if not _installed:
        _installed = True
        sys.addaudithook(_hook)
        sys.path_hooks.insert(0, _export_path_hook)


def _pseudo_filename(path: object) -> bool:
    """``'<unknown>'``, ``'<string>'``: the name of source that has no file."""
    return isinstance(path, str) and path.startswith("<") and path.endswith(">")
