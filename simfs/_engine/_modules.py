"""Each simulated process's own copies of the program's modules.

Why: real pods on real hosts are separate interpreters.  A module-level
lock, event or cache in the program under test is one object per OS
process, so two pods racing to fill a shared cache can only coordinate
through the filesystem.  Simulated processes share this interpreter; with
one ``sys.modules`` they would coordinate through those in-memory objects
as real pods never can, and hide the very races the world exists to show
(measured on a real inference worker's model cache: 1 download and 0
collisions shared, 10 collisions in 10 races with copies).

So each simulated OS process (a ``ProcessGroup``: its threads share it)
has a ``ModuleView``: its own copies of the *per-process* modules, imported
afresh inside the process the first time it imports them, exactly as a new
interpreter would, and compiled from the same cached bytecode (only module
bodies run again).  ``sys.modules`` holds the running process's copies:
at every hand-over of the baton between two OS processes the scheduler
calls ``switch_to``, which takes the outgoing view's per-process entries
out and puts the incoming view's in (a ``dict.update`` and a set
difference, in C).  The test process itself is one more view (``MAIN``).

Which modules are per-process: pure-Python modules outside the standard
library (site-packages included), the test's own modules included.  What
cannot be copied is shared, and the process records it
(``ModuleView.shared``): extension modules (a C extension's state lives in
one copy per interpreter; numpy refuses a second load), packages that hold
any (numpy, torch, pandas, pyarrow ...), the standard library, simfs and the
test harness (pytest, Hypothesis, trio), pure-Python packages that a shared
package imports (its classes must stay the ones it checks against), and any
name a world lists in ``shared_modules``.
"""

from __future__ import annotations

import _locale
import contextlib
import functools
import gc
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import sysconfig
import threading as _threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from types import BuiltinFunctionType, FunctionType, MethodType, ModuleType
from typing import Any, Final, TypeGuard

from ._routing import routing as _tls

# Shared by design: the harness that runs the world, and small packages
# whose identity other packages test against (typing_extensions' special
# forms are compared by identity by pydantic-core and typeguard).
HARNESS: Final = frozenset({
    "simfs", "_pytest", "pytest", "pluggy", "py", "iniconfig", "hypothesis",
    "_hypothesis_pytestplugin", "_hypothesis_ftz_detector", "_hypothesis_globals", "trio",
    "outcome", "sniffio", "sortedcontainers", "attr", "attrs", "exceptiongroup", "greenlet",
    "pyfakefs", "xdist", "execnet", "typing_extensions", "_distutils_hack", "setuptools",
    "pkg_resources", "_virtualenv", "coverage", "pytest_cov", "__editable___simfs_0_2_0_finder",
})

# The standard library's own directory (pure-Python modules of the stdlib
# that are not in sys.stdlib_module_names, such as test helpers).
_STDLIB_DIRS: Final = tuple(
    os.path.realpath(path) + os.sep for path in
    {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]})
_SITE_MARK: Final = f"{os.sep}site-packages{os.sep}"
_EXTENSIONS: Final = tuple(importlib.machinery.EXTENSION_SUFFIXES)


# -- reading a library's objects without running its code ---------------------
#
# simfs scans every loaded module (here and in simfs._patch's alias scan).  A
# library's object may run code when read: torch.distributed.reduce_op's
# ``__getattribute__`` warns FutureWarning, and ``isinstance`` reads
# ``__class__`` through it; a metaclass may define ``__getattribute__``; a
# module's ``__getattr__`` (PEP 562) may import a submodule.  The scans so
# look at ``type(value)`` and read ``__dict__`` and ``__module__`` through
# the C descriptors of ``ModuleType`` and ``type`` themselves, which run no
# code of the library's (issue 30).

_MODULE_DICT: Final[Any] = vars(ModuleType)["__dict__"]
_TYPE_DICT: Final[Any] = vars(type)["__dict__"]
_TYPE_MODULE: Final[Any] = vars(type)["__module__"]


def is_module(value: object) -> TypeGuard[ModuleType]:
    """``isinstance(value, ModuleType)`` without reading ``value.__class__``."""
    return issubclass(type(value), ModuleType)


def module_namespace(value: object) -> dict[str, Any] | None:
    """A module's own ``__dict__``, read without its code; None for anything else."""
    if not issubclass(type(value), ModuleType):
        return None
    namespace = _MODULE_DICT.__get__(value)
    return namespace if type(namespace) is dict else None


def class_namespace(cls: type) -> Any:
    """``vars(cls)`` without the metaclass's ``__getattribute__``."""
    return _TYPE_DICT.__get__(cls)


def class_module(cls: object) -> object:
    """``cls.__module__`` without the metaclass's ``__getattribute__`` (None if unset)."""
    try:
        return _TYPE_MODULE.__get__(cls)
    except AttributeError:
        return None


def defining_module(value: object) -> object:
    """The module name ``value`` (a module, class, function or instance) says it is from.

    What ``getattr(value, "__module__")`` answers (a module's ``__name__``),
    read without running any of the value's code: an instance answers its
    class's.
    """
    kind = type(value)
    if kind is MethodType:
        value = value.__func__  # type: ignore[attr-defined]
        kind = type(value)
    if issubclass(kind, ModuleType):
        namespace = module_namespace(value)
        return None if namespace is None else namespace.get("__name__")
    if issubclass(kind, type):
        return class_module(value)
    if kind is FunctionType or kind is BuiltinFunctionType:
        return value.__module__
    return class_namespace(kind).get("__module__")


@contextlib.contextmanager
def scanning() -> Iterator[None]:
    """Warnings off for one of simfs's scans (never a library's warning raised there)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _settings_now() -> tuple[Any, ...]:
    """The process-wide settings a program changes by calls (whose routes say
    so, ``settings_changed``): the collector's switch and thresholds,
    socket's default timeout, the C locale (every category, as
    ``setlocale(LC_ALL)`` names it) and ``threading.settrace``/``setprofile``'s
    hooks for new threads."""
    socket = sys.modules.get("socket")
    return (gc.isenabled(), gc.get_threshold(),
            None if socket is None else socket.getdefaulttimeout(),
            _locale.setlocale(_locale.LC_ALL),
            _threading._trace_hook, _threading._profile_hook)  # type: ignore[attr-defined]


def _hooks_now() -> tuple[Any, ...]:
    """The hooks a program sets by assignment: sys's, and threading.excepthook."""
    return (sys.excepthook, sys.unraisablehook, sys.displayhook, sys.breakpointhook,
            sys.dont_write_bytecode, _threading.excepthook)


class ModuleView:
    """One OS process's per-process modules, by name, and its interpreter-wide state.

    ``shared`` names the packages this process used without a copy of its
    own (extension modules, and their pure-Python dependencies).

    Besides modules, a real interpreter keeps state that programs configure
    once per process: ``sys.argv``, ``sys.path``, ``sys.stdin``,
    ``sys.stdout`` and ``sys.stderr``, the hooks set by assignment
    (``_hooks_now``), ``warnings``' filters and ``tempfile.tempdir``
    (swapped with the modules at every switch), the settings changed by
    calls (``_settings_now``: swapped once a process made such a call), and
    its signal handlers, ``atexit`` and fork hooks (kept here, read and
    written by the routes for ``signal`` and ``atexit``).  A new process
    starts with its creator's values, as a child inherits its parent's
    (copies: ``sys.path`` edited in one process is not another's, nor the
    test's after the run).
    """

    __slots__ = ("argv", "at_exit", "at_fork", "filters", "hooks", "label", "names", "owner",
                 "path", "settings", "shared", "signal_handlers", "stdio", "table", "tempdir")

    def __init__(self, label: str, argv: list[str] | None = None,
                 filters: list[Any] | None = None, modules_of: ModuleView | None = None,
                 path: list[str] | None = None) -> None:
        self.label = label
        # Whose module table this process uses: its own, or (``modules_of``)
        # the test's, for a target that is the test's own object.
        self.owner: ModuleView = self if modules_of is None else modules_of
        self.table: dict[str, ModuleType] = {}
        self.names: frozenset[str] = frozenset()
        self.shared: set[str] = set()
        # A new interpreter's: the test's command line and -W options (a
        # copy, as a child started with the same ones has), its default
        # temporary directory found afresh (by tempfile, inside the process).
        self.argv: list[str] = list(sys.argv) if argv is None else argv
        self.path: list[str] = _path_copy() if path is None else path
        self.stdio: tuple[Any, Any, Any] = (sys.stdin, sys.stdout, sys.stderr)
        self.hooks: tuple[Any, ...] = _hooks_now()
        self.settings: tuple[Any, ...] = _settings_now()
        warnings = sys.modules.get("warnings")
        self.filters: list[Any] = (filters if filters is not None else
                                   list(warnings.filters) if warnings is not None else [])
        self.tempdir: Any = None
        self.signal_handlers: dict[int, Any] = {}
        self.at_exit: list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = []
        self.at_fork: list[tuple[str, Callable[[], Any]]] = []

    def __repr__(self) -> str:
        return f"<ModuleView {self.label!r}: {len(self.table)} modules>"


MAIN: Final = ModuleView("the test process", argv=sys.argv, filters=[], path=sys.path)
_installed: ModuleView = MAIN
# Names the import system looked for since the last switch (sys.modules
# misses): the only candidates for the running view's table.
_fresh: list[str] = []
# Top-level packages classified so far: True when per-process.
_top_verdicts: dict[str, bool] = {}
# Top-level pure-Python packages imported by a shared package: shared too.
_shared_dependencies: set[str] = set()
# Names a world asked to share (World(shared_modules=...)), while it exists.
_asked_shared: set[str] = set()
_engaged = False


def installed() -> ModuleView:
    """The view whose copies ``sys.modules`` holds now."""
    return _installed


def _top(name: str) -> str:
    return name.partition(".")[0]


def _has_extension(directories: Iterable[str]) -> bool:
    for directory in directories:
        for _root, _dirs, files in os.walk(directory):
            if any(file.endswith(_EXTENSIONS) for file in files):
                return True
    return False


def _top_is_per_process(top: str, module: ModuleType) -> bool:
    verdict = _top_verdicts.get(top)
    if verdict is None:
        # simfs's own look at the package's real files (realpath's lstat,
        # os.walk's scandir), never a simulated call: routed, each one yielded
        # to the scheduler, and this runs while the baton is handed on
        # (switch_to adopts the modules a process imported).  A process passing
        # the baton was marked running, the baton went elsewhere, and the run
        # ended in a Deadlock (zarr used by two processes at once).
        with _routing_off():
            verdict = _classify_top(top, module)
        _top_verdicts[top] = verdict
    return verdict


# Standard-library packages whose state a program configures for its whole
# process (handlers, levels, loggers): each process imports its own.
STDLIB_PER_PROCESS: Final = frozenset({"logging"})


def _classify_top(top: str, module: ModuleType) -> bool:
    if top in STDLIB_PER_PROCESS:
        return True
    if top in sys.stdlib_module_names or top in HARNESS or top in ("__main__", "__mp_main__"):
        return False
    namespace = module_namespace(sys.modules.get(top, module))
    spec = None if namespace is None else namespace.get("__spec__")
    if spec is None:
        return False  # built by the program (types.ModuleType) or a C module
    locations = spec.submodule_search_locations
    if locations is not None:  # a package, or a namespace package
        if spec.origin is not None and not spec.origin.endswith(".py"):
            return False
        paths = list(locations)
        if any(os.path.realpath(path).startswith(_STDLIB_DIRS) and _SITE_MARK not in path
               for path in paths):
            return False
        return not _has_extension(paths)
    origin = spec.origin or ""
    if not origin.endswith(".py"):
        return False  # extension, builtin, frozen, sourceless
    return not (os.path.realpath(origin).startswith(_STDLIB_DIRS) and _SITE_MARK not in origin)


def per_process(name: str, module: ModuleType) -> bool:
    """Whether each simulated process gets its own copy of module ``name``."""
    top = _top(name)
    if top in _asked_shared or top in _shared_dependencies or name in _asked_shared:
        return False
    return _top_is_per_process(top, module)


class _FreshImports(importlib.abc.MetaPathFinder):
    """Notes every name the import system looks for; inside a process, finds it too.

    The import system's own file reads are the interpreter's, not the
    program's: the standard finders and loaders read the real disk below
    every route already, but a finder written in Python (pytest's
    assertion-rewriting hook, for the test's own modules) would go through
    the routes.  Inside a simulated process this finder therefore asks the
    other finders itself with routing off, and loads the module through
    ``_OwnCopyLoader``: the compiled code is made once per interpreter and
    source file version, and only the module's body runs again, routed, in
    each process.
    """

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        _fresh.append(fullname)
        # Which module imports: a walk up the frames, needed only for a
        # top-level name not yet known to be a shared package's dependency.
        importer = (_importing_module() if "." not in fullname
                    and fullname not in _shared_dependencies else None)
        if importer is not None:
            # A shared package importing a pure-Python one: that one stays
            # shared, so the classes the shared package checks are the same.
            top = _top(importer)
            if (top != _top(fullname) and not _top_verdicts.get(top, True)
                    and top not in sys.stdlib_module_names and top not in HARNESS):
                _shared_dependencies.add(fullname)
        process = getattr(_tls, "process", None)
        if process is None:
            return None
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                # The standard finders run routed: their file reads are below
                # every route already, and the audit hook must still see a
                # sys.path entry in the export (code there is refused, not
                # looked for on the real disk).  Another finder runs unrouted.
                _tls.process = process if _standard(finder) else None
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
            else:
                return None
            _tls.process = None
            loader = spec.loader
            origin = spec.origin
            if (loader is not None and hasattr(loader, "exec_module") and spec.has_location
                    and isinstance(origin, str) and origin.endswith(".py")):
                try:
                    status = os.stat(origin)
                except OSError:
                    return spec
                key = (origin, status.st_mtime_ns, status.st_size)
                spec.loader = _OwnCopyLoader(loader, key)
        finally:
            _tls.process = process
        return spec


def _standard(part: object) -> bool:
    """A finder or loader of the standard library's import system.

    (PathFinder is a class used as a finder; others are instances.)
    """
    owner = part if isinstance(part, type) else type(part)
    module = getattr(owner, "__module__", "") or ""
    return module.startswith(("importlib", "_frozen_importlib", "zipimport"))


# Compiled module code by (source path, mtime, size): code objects are
# immutable, so every process's copy runs the same one with its own globals.
# (Bytecode caching may be off, PYTHONDONTWRITEBYTECODE: then each import
# would compile again, measured at 0.4 ms a small module.)
_code_cache: dict[tuple[str, int, int], Any] = {}


class _OwnCopyLoader(importlib.abc.Loader):
    """A module's own loader, for a process's copy: its code cached, its body routed.

    Everything but loading (``get_source`` for tracebacks, resource
    readers) is the original loader's.
    """

    def __init__(self, loader: Any, key: tuple[str, int, int]) -> None:
        self._loader = loader
        self._key = key

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        process = _tls.process
        _tls.process = None
        try:
            module: ModuleType | None = self._loader.create_module(spec)
        finally:
            _tls.process = process
        return module

    def exec_module(self, module: ModuleType) -> None:
        process = _tls.process
        if process is not None:
            process._importing += 1
        try:
            code = _code_cache.get(self._key)
            if code is None:
                code = self._compile(module)
            if code is not None:  # else the loader ran the body itself, once, routed (below)
                exec(code, module.__dict__)
        finally:
            if process is not None:
                process._importing -= 1
        for hook in AFTER_OWN_COPY:
            hook(module)

    def _compile(self, module: ModuleType) -> Any:
        loader = self._loader
        process = _tls.process
        get_code = getattr(loader, "get_code", None)
        owner_name = type(loader).__module__ or ""
        if get_code is None and not owner_name.startswith("_pytest."):
            # Another loader that runs the body itself (simfs's own
            # _RoutingLoader, which routes a library right after its body):
            # as it is, routed.  With routing off its nested imports would
            # take Python's module locks under the real thread id while the
            # outer import holds them under the process's: a real deadlock
            # (measured: numpy first imported inside a process hung).
            loader.exec_module(module)
            return None
        _tls.process = None
        try:
            if get_code is not None:
                code = get_code(module.__name__)
                if code is None:
                    raise ImportError(f"no code for module {module.__name__!r}")
                _code_cache[self._key] = code
                return code
            # pytest's hook reads, rewrites and execs in one method: its exec
            # (a global of its module) runs the body routed again, and keeps
            # the rewritten code for the next process.
            owner = sys.modules.get(type(loader).__module__)
            if owner is not None and owner.__dict__.get("exec") is not _exec_routed:
                owner.__dict__["exec"] = _exec_routed
            _body.append((process, self._key))
            try:
                loader.exec_module(module)
            finally:
                _body.pop()
            return None
        finally:
            _tls.process = process


# Called with each process's own copy of a module once its body has run
# (the routes' layer adds its fix-ups: ``simfs/_patch/__init__.py``).
AFTER_OWN_COPY: list[Callable[[ModuleType], None]] = []


# The process whose module body a wrapped loader is about to run, and its
# code's cache key (a stack: an import inside a body nests).
_body: list[tuple[Any, tuple[str, int, int]]] = []


def _exec_routed(code: Any, namespace: Any = None, *rest: Any) -> None:
    """``exec`` for a wrapped loader: the body runs inside its process again."""
    if not _body:
        exec(code, namespace, *rest)
        return
    process, key = _body[-1]
    _code_cache[key] = code
    saved = _tls.process
    _tls.process = process
    try:
        exec(code, namespace, *rest)
    finally:
        _tls.process = saved


def _importing_module() -> str | None:
    """The module whose code asked for the import (first frame outside importlib)."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if not (name.startswith("importlib") or name == __name__
                or frame.f_code.co_filename.startswith("<frozen")):
            return str(name)
        frame = frame.f_back  # type: ignore[assignment]
    return None


_finder: Final = _FreshImports()


def engage(shared: Iterable[str] = ()) -> None:
    """Start keeping per-process copies: put the test's own into ``MAIN``.

    Called when a world with per-process modules first runs a process.
    """
    global _engaged
    _asked_shared.update(shared)
    if not _engaged:
        _engaged = True
        sys.meta_path.insert(0, _finder)
        _adopt(MAIN, list(sys.modules.copy()))
    elif _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


def _adopt(view: ModuleView, names: Iterable[str]) -> None:
    with scanning():
        _adopt_quietly(view, names)


def _adopt_quietly(view: ModuleView, names: Iterable[str]) -> None:
    modules = sys.modules
    table = view.table
    changed = False
    for name in names:
        module = modules.get(name)
        if is_module(module) and per_process(name, module):
            if table.get(name) is not module:
                table[name] = module
                changed = True
                if view is not MAIN:
                    _note_shared(view, module)
        else:
            if name in table:
                # Shared since (a dependency of a shared package): drop the copy.
                del table[name]
                changed = True
            if module is not None and _installed is not MAIN and "." not in name:
                top = _top(name)
                if top not in sys.stdlib_module_names and top not in HARNESS:
                    view.shared.add(top)
    if changed:
        view.names = frozenset(table)


def _shared_top(value: object) -> str | None:
    """The shared non-standard package ``value`` (a module, class or function) is from."""
    name = defining_module(value)
    if type(name) is not str:
        return None
    top = _top(name)
    if top in sys.stdlib_module_names or top in HARNESS or top in ("__main__", "builtins"):
        return None
    module = sys.modules.get(top)
    if module is None:
        return None
    if per_process(top, module):
        # A package of the program's own whose submodule the world was asked
        # to share: that submodule is one copy for every process (named by
        # the name the world was given).
        return next((asked for asked in _asked_shared
                     if name == asked or name.startswith(asked + ".")), None)
    return top


def shared_reason(top: str) -> str:
    """Why the package ``top`` (or the submodule a world was asked to share)
    is one copy for every process, as a clause."""
    if top in _asked_shared:
        return "World(shared_modules=...) names it"
    if top in _shared_dependencies:
        return ("a shared package imports it, so it is shared too (that package's "
                "isinstance checks must see the classes it knows)")
    return "it holds extension modules, which an interpreter loads once"


def newly_shared(processes: Iterable[tuple[str, ModuleView]], reported: set[str]
                 ) -> list[tuple[str, str]]:
    """(package, process name) for shared packages not in ``reported`` (added to it)."""
    found: list[tuple[str, str]] = []
    for name, view in processes:
        for top in sorted(view.shared - reported):
            reported.add(top)
            found.append((top, name))
    return found


def _note_shared(view: ModuleView, module: ModuleType) -> None:
    """Record the shared packages a process's own copy of ``module`` refers to."""
    namespace = module_namespace(module)
    for value in list(namespace.values()) if namespace is not None else ():
        top = _shared_top(value)
        if top is not None:
            view.shared.add(top)


def switch_to(view: ModuleView) -> None:
    """Install ``view``'s copies in ``sys.modules`` (the baton passes to its process)."""
    global _installed
    outgoing = _installed
    if outgoing is view:
        return
    leaving, entering = outgoing.owner, view.owner
    if _fresh:
        fresh = list(_fresh)
        _fresh.clear()
        _adopt(leaving, fresh)
    modules = sys.modules
    if leaving is not entering:
        for name in leaving.names - entering.names:
            modules.pop(name, None)
        modules.update(entering.table)
    _installed = view
    # Each swap below is skipped when the entering process's object is the
    # one already in place, and warnings is told its filters changed only
    # when they differ: that makes every module's warning registry start
    # afresh (a "default" warning shown again), and two processes polling in
    # step hand the baton on at every call.
    outgoing.argv = argv = sys.argv
    if argv is not view.argv:
        sys.argv = view.argv
    outgoing.path = path = sys.path
    if path is not view.path:
        sys.path = view.path
    stdin, stdout, stderr = stdio = view.stdio
    if sys.stdout is not stdout or sys.stderr is not stderr or sys.stdin is not stdin:
        # contextlib.redirect_stdout in one process is that process's own
        outgoing.stdio = (sys.stdin, sys.stdout, sys.stderr)
        sys.stdin, sys.stdout, sys.stderr = stdio
    else:
        outgoing.stdio = stdio
    excepthook, unraisablehook, displayhook, breakpointhook, no_bytecode, thread_hook = \
        hooks = view.hooks
    if (sys.excepthook is not excepthook or sys.unraisablehook is not unraisablehook
            or sys.displayhook is not displayhook or sys.breakpointhook is not breakpointhook
            or sys.dont_write_bytecode is not no_bytecode
            or _threading.excepthook is not thread_hook):
        # A process's sys.excepthook = ... is its own (it silenced the
        # test's own errors after the run before).
        outgoing.hooks = _hooks_now()
        (sys.excepthook, sys.unraisablehook, sys.displayhook, sys.breakpointhook,
         sys.dont_write_bytecode, _threading.excepthook) = hooks
    else:
        outgoing.hooks = hooks
    if _settings_changed or outgoing is MAIN:
        _swap_settings(outgoing, view)
    tempfile: Any = modules.get("tempfile")
    if tempfile is not None:
        outgoing.tempdir = tempdir = tempfile.tempdir
        if tempdir is not view.tempdir:
            tempfile.tempdir = view.tempdir
    warnings: Any = modules.get("warnings")
    if warnings is not None:
        outgoing.filters = filters = warnings.filters
        entering_filters = view.filters
        if filters is not entering_filters:
            warnings.filters = entering_filters
            if filters != entering_filters:
                warnings._filters_mutated()


# Whether a process ever changed one of ``_settings_now``'s settings (their
# routes say so): until then no switch reads them, which two processes
# polling in step would pay at every call.
_settings_changed = False


def settings_changed() -> None:
    """A process changed a process-wide setting swapped by ``_swap_settings``."""
    global _settings_changed
    _settings_changed = True


def _swap_settings(outgoing: ModuleView, view: ModuleView) -> None:
    outgoing.settings = now = _settings_now()
    if not _settings_changed or now == view.settings:
        return  # nothing changed yet: only the test's own, read as it leaves MAIN
    enabled, threshold, timeout, place, trace_hook, profile_hook = view.settings
    gc.set_threshold(*threshold)
    (gc.enable if enabled else gc.disable)()
    socket: Any = sys.modules.get("socket")
    if socket is not None:
        socket.setdefaulttimeout(timeout)
    if place != now[3]:
        _locale.setlocale(_locale.LC_ALL, place)
    _threading._trace_hook, _threading._profile_hook = trace_hook, profile_hook  # type: ignore[attr-defined]


def release(view: ModuleView) -> None:
    """Forget a view whose process has ended (its copies are freed with it)."""
    if _installed is view:
        switch_to(MAIN)
    if view.owner is view:
        view.table.clear()
        view.names = frozenset()


def _resolve_qualname(module: ModuleType, qualname: str) -> object:
    found: object = module
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


def own_copy(target: Callable[..., Any]) -> Callable[..., Any] | None:
    """How to find ``target`` in the running process's own modules, or None if shared.

    The rule is ``pickle``'s (and so ``multiprocessing``'s): what pickle
    sends by reference, a function or class defined at a module's top level,
    is looked up by its qualified name in the process's copy of its module
    (a ``functools.partial`` of one too, its arguments as they are).  What
    pickle cannot send by name (a closure, a lambda, a bound method, a
    callable object) is the test's own, shared with its module globals.
    Returns a zero-argument callable that does the lookup when called
    inside the process, so the copy is imported there.
    """
    if isinstance(target, NamedTarget):
        return lambda: _by_name(target.module_name, target.qualname)
    if isinstance(target, functools.partial):
        inner = own_copy(target.func)
        if inner is None:
            return None
        args, keywords = target.args, target.keywords
        return lambda: functools.partial(inner(), *args, **keywords)
    if not isinstance(target, FunctionType | type):
        return None
    module_name = getattr(target, "__module__", None)
    qualname = getattr(target, "__qualname__", None)
    if (not isinstance(module_name, str) or not isinstance(qualname, str)
            or "<locals>" in qualname or "<lambda>" in qualname):
        return None
    module = sys.modules.get(module_name)
    if module_name == "__main__":
        # A script read from ``-c`` or stdin ('<stdin>') has no file to import
        # again: its objects are the test's, shared (multiprocessing's spawn
        # cannot hand them on at all).
        if module is None or _real_stat(getattr(module, "__file__", None)) is None:
            return None
    elif module is None or not per_process(module_name, module):
        return None
    try:
        if _resolve_qualname(module, qualname) is not target:
            return None  # not found under its name (replaced, or made at run time)
    except AttributeError:
        return None
    return lambda: _by_name(module_name, qualname)


def own_arguments(args: tuple[Any, ...], kwargs: dict[str, Any]
                  ) -> Callable[[], tuple[tuple[Any, ...], dict[str, Any]]] | None:
    """How to find the arguments' classes and functions in the process's own modules.

    As ``pickle`` (and so ``multiprocessing``) hands a class or function to
    another process by name, an argument that is a class, a function or a
    ``functools.partial`` of one, from a per-process module, becomes the
    process's own (so ``except filelock.Timeout`` in the process catches
    what a ``filelock.FileLock`` passed in raises).  Any other object is the
    test's, shared.  None when no argument needs it.
    """
    found = {index: own for index, value in enumerate(args)
             if (own := _own_argument(value)) is not None}
    found_kw = {key: own for key, value in kwargs.items()
                if (own := _own_argument(value)) is not None}
    if not found and not found_kw:
        return None

    def resolve() -> tuple[tuple[Any, ...], dict[str, Any]]:
        own_args = tuple(found[i]() if i in found else value for i, value in enumerate(args))
        own_kwargs = {key: found_kw[key]() if key in found_kw else value
                      for key, value in kwargs.items()}
        return own_args, own_kwargs

    return resolve


def _own_argument(value: object) -> Callable[[], Any] | None:
    if isinstance(value, type | FunctionType | functools.partial):
        return own_copy(value)
    return None


def import_copy(module_name: str) -> ModuleType:
    """The running process's copy of ``module_name``, imported now if it has none.

    ``__main__`` is imported as ``__mp_main__`` from the script's file, as
    ``multiprocessing``'s spawn start method does, so its
    ``if __name__ == "__main__":`` block does not run again.
    """
    if module_name != "__main__":
        return importlib.import_module(module_name)
    view = _installed
    copy = view.table.get("__mp_main__")
    if copy is None:
        path = getattr(sys.modules["__main__"], "__file__", None)
        spec = importlib.util.spec_from_file_location("__mp_main__", path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import the script {path!r} again as __mp_main__")
        # A script has no .pyc: compiled once per version of its file, as
        # every other module a process imports (_OwnCopyLoader), not per process.
        origin = spec.origin
        status = _real_stat(origin)
        if origin is not None and status is not None:
            spec.loader = _OwnCopyLoader(spec.loader,
                                         (origin, status.st_mtime_ns, status.st_size))
        copy = importlib.util.module_from_spec(spec)
        sys.modules["__mp_main__"] = view.table["__mp_main__"] = copy
        view.names = frozenset(view.table)
        spec.loader.exec_module(copy)
    return copy


@contextlib.contextmanager
def _routing_off() -> Iterator[None]:
    """The interpreter's own real call (not the program's): routing off, then restored."""
    process = getattr(_tls, "process", None)
    _tls.process = None
    try:
        yield
    finally:
        _tls.process = process


def _path_copy() -> list[str]:
    """``sys.path`` for a new process: a copy, its ``''`` (the working
    directory, to the import system) the real one now, as a run stands the
    test's real directory for it (``_guards/_boundary.py``): the process's
    own working directory is simulated, the files it imports are real."""
    if "" not in sys.path:
        return list(sys.path)
    with _routing_off():
        try:
            here = os.getcwd()
        except OSError:  # the real directory was removed: the kernel finds nothing there
            here = ""
    return [entry or here for entry in sys.path]


def _real_stat(path: str | None) -> os.stat_result | None:
    """``os.stat`` of a module's file with routing off (the interpreter's read)."""
    if path is None:
        return None
    with _routing_off():
        try:
            return os.stat(path)
        except OSError:
            return None


class NamedTarget:
    """A spawn target named ``"package.module:function"``, imported in the process."""

    __slots__ = ("__name__", "module_name", "qualname")

    def __init__(self, module_name: str, qualname: str) -> None:
        self.module_name = module_name
        self.qualname = qualname
        self.__name__ = qualname.rpartition(".")[2]

    def __repr__(self) -> str:
        return f"{self.module_name}:{self.qualname}"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _by_name(self.module_name, self.qualname)(*args, **kwargs)


def named_target(module_name: str, qualname: str) -> NamedTarget:
    """The target ``module_name:qualname``, looked up when the process runs."""
    return NamedTarget(module_name, qualname)


def _by_name(module_name: str, qualname: str) -> Any:
    copy = import_copy(module_name)
    try:
        return _resolve_qualname(copy, qualname)
    except AttributeError:
        raise LookupError(
            f"spawn target {module_name}:{qualname}: the process's own copy of module "
            f"{module_name!r} has no attribute {qualname!r} (made at run time?); spawn a "
            "function defined at the module's top level, or pass World("
            "per_process_modules=False) to run the test's own object, shared with every "
            "process") from None

