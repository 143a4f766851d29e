"""What each simulated process inherits from its host: environment and resource limits.

A real process starts with the environment and the resource limits its
parent hands it at exec; neither is the test process's.  Both come from the
world so that a seed gives the same run under any user, shell or CI job:
the real environment differs per machine (``USER``, ``HOME``, ``LANG``,
``COLUMNS``, CI variables), and code branches on it (``getpass.getuser()``
names lock files; ``locale`` and ``shutil.get_terminal_size`` read it).

The default environment is a small, fixed login environment of the
world's user, root (uid 0 owns every simulated file):

- ``HOME=/root``, ``USER=root``, ``LOGNAME=root``: root's passwd entry,
  as ``login``/``su -`` set them (``getpass.getuser()`` reads ``LOGNAME``
  first);
- ``PATH``: the default of Docker/moby for Linux containers
  (``oci.DefaultPathEnv``), also Debian's root ``PATH``;
- ``LANG=C.UTF-8``: the UTF-8 C locale (glibc 2.35+, and what CPython's
  PEP 538 coerces the C locale to);
- ``TZ``: the world's zone (``World(tz=)``), which is also what the C
  library's local time uses during a run (see ``_patch/_tz.py``);
- ``HOSTNAME``: the host's name, as Docker sets it in every container.

No ``TERM``, ``COLUMNS`` or ``LINES``: a simulated process runs as a batch
job, without a terminal.  ``World(env=)`` changes this for every process and
``spawn(..., env=)`` for one; a value of None removes a variable.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import os
import posixpath
import re
import zoneinfo
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from ._engine._scheduler import Process

# oci.DefaultPathEnv("linux") in moby (daemon/oci), the PATH of a container
# whose image sets none; Debian's /etc/profile gives root the same.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The world's user: root, the owner of every simulated file (see _patch/_ids.py).
USER = "root"
HOME = "/root"

# The world's zone unless World(tz=) names another.
DEFAULT_ZONE = "UTC"
# Every TZif file starts with this magic (RFC 8536 §3.1).
_TZIF_MAGIC = b"TZif"


def _zone_directories() -> list[str]:
    """Where zone files are looked for: the ``tzdata`` package first, then the system's.

    The package, when installed, pins one release of the IANA database for
    every machine (a zone's rules change between releases); the system
    directories (``zoneinfo.TZPATH``) are the ones glibc reads.
    """
    directories = []
    try:
        import tzdata  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        pass
    else:
        directories.append(os.path.join(os.path.dirname(tzdata.__file__), "zoneinfo"))
    return directories + list(zoneinfo.TZPATH)


def zone_file(name: str) -> str | None:
    """The tz database file of ``name`` on this machine (by absolute path), or None."""
    if not name or name.startswith("/") or ".." in name.split("/") or "\0" in name:
        return None
    for directory in _zone_directories():
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            with open(path, "rb") as file:
                if file.read(4) == _TZIF_MAGIC:
                    return path
    return None


def check_zone(name: object) -> str:
    """``name`` if it names a time zone this machine's tz database holds.

    Args:
        name: an IANA zone name such as ``"Europe/Berlin"``; ``"UTC"`` needs no database.

    Raises:
        TypeError: not a str.
        ValueError: no such zone here; the message suggests close names and
            says how to list the valid ones.
    """
    if not isinstance(name, str):
        raise TypeError(f"tz must be an IANA time zone name such as 'Europe/Berlin', "
                        f"not {name!r}")
    if name == DEFAULT_ZONE or zone_file(name) is not None:
        return name
    known = sorted(zoneinfo.available_timezones())
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    if not close:
        lowered = {zone.lower(): zone for zone in known}
        close = [lowered[name.lower()]] if name.lower() in lowered else []
    hint = f"did you mean {', '.join(map(repr, close))}? " if close else ""
    raise ValueError(
        f"tz={name!r} is not a time zone of this machine's tz database "
        f"({', '.join(_zone_directories()) or 'none found'}); {hint}valid names are IANA "
        "names such as 'UTC', 'Europe/Berlin' or 'America/New_York': list them with "
        "python -c \"import zoneinfo; print(sorted(zoneinfo.available_timezones()))\"")


def default_environment(host_name: str, zone: str) -> dict[str, str]:
    """The environment a process on ``host_name`` starts with when nothing is changed."""
    return {"HOME": HOME, "HOSTNAME": host_name, "LANG": "C.UTF-8", "LOGNAME": USER,
            "PATH": DEFAULT_PATH, "TZ": zone, "USER": USER}


def check_env(env: object, where: str) -> dict[str, str | None]:
    """``env`` as a dict after checking each name and value as ``putenv(3)`` would.

    Args:
        env: a mapping of variable names to str values, or None to remove one.
        where: how the caller passed it, for the error (``World(env=)``).

    Raises:
        TypeError: not a mapping, or a name or value that is not a str.
        ValueError: an empty name, a name with ``=``, or a NUL in a name or value.
    """
    if not isinstance(env, Mapping):
        raise TypeError(f"{where} must be a mapping of names to str (None removes one), "
                        f"not {env!r}")
    checked: dict[str, str | None] = {}
    for name, value in env.items():
        if not isinstance(name, str):
            raise TypeError(f"{where}: variable names must be str, not {name!r}")
        if not name or "=" in name or "\0" in name:
            raise ValueError(f"{where}: {name!r} is not a variable name (it must be "
                             "non-empty, without '=' or NUL)")
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{where}: the value of {name!r} must be a str or None (to "
                            f"remove it), not {value!r}")
        if value is not None and "\0" in value:
            raise ValueError(f"{where}: the value of {name!r} contains a NUL byte")
        checked[name] = value
    return checked


def merged(base: dict[str, str], *layers: Mapping[str, str | None], zone: str,
           where: str) -> dict[str, str]:
    """``base`` with each layer applied in turn (None removes a variable).

    Raises:
        ValueError: ``TZ`` is set to another zone than the world's: local time
            is process-wide in the C library, so one process cannot have its own.
    """
    result = dict(base)
    for layer in layers:
        for name, value in layer.items():
            if value is None:
                result.pop(name, None)
            else:
                result[name] = value
    tz = result.get("TZ")
    if tz is not None and tz != zone:
        raise ValueError(f"{where}: TZ={tz!r} differs from the world's zone {zone!r}; "
                         f"choose the zone with World(tz={tz!r}) (local time is "
                         "process-wide in the C library), or remove TZ with None")
    return result


def check_spawn_env(target: Callable[..., Any], env: object) -> None:
    """Refuse ``spawn(..., env=)`` when ``target`` could have wanted ``env`` itself.

    ``spawn`` passes its other keywords to the target, so a target that
    takes an ``env`` argument (or any keyword) makes ``env=`` ambiguous: it
    is refused rather than silently taken from the target.

    Raises:
        TypeError: the target accepts a keyword named ``env``.
    """
    if env is None or (isinstance(target, functools.partial) and "env" in target.keywords):
        return  # the target's own env is already bound: spawn's env= is unambiguous
    try:
        parameters = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature takes no env
        return
    for parameter in parameters:
        if parameter.kind is inspect.Parameter.VAR_KEYWORD or (
                parameter.name == "env" and parameter.kind in (
                    inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)):
            name = getattr(target, "__name__", repr(target))
            raise TypeError(
                f"spawn(..., env=) sets the simulated process's environment, but the target "
                f"{name!r} also accepts a keyword 'env' (as {parameter}); pass the target's "
                "own arguments with functools.partial(target, env=...) or a lambda, and the "
                "process's environment with spawn's env=")


class ProcessEnvironment:
    """One simulated process's environment and resource limits, shared by its threads.

    ``environ`` is what ``os.environ`` shows (the interpreter's copy, made at
    start); ``native`` is the C library's environment that ``os.putenv`` and
    ``os.unsetenv`` change, as in a real process, where ``putenv`` does not
    update ``os.environ``.  Both start equal.  Keys and values are bytes, as
    ``os.environ``'s own store holds them on POSIX.
    """

    __slots__ = ("environ", "limits", "native")

    def __init__(self, variables: Mapping[str, str]) -> None:
        self.environ = {os.fsencode(name): os.fsencode(value)
                        for name, value in variables.items()}
        self.native = dict(self.environ)
        # resource limits this process set (setrlimit); unset ones are the defaults.
        self.limits: dict[int, tuple[int, int]] = {}


def environment_of(process: Process) -> ProcessEnvironment:
    """The environment of ``process``'s OS process (``World.spawn`` made it)."""
    from ._world import host_of

    return host_of(process).world.environments[process.group.pid]


# -- local disks ----------------------------------------------------------------------

# /tmp is a tmpfs of half the host's 16 GiB (tmpfs(5)'s default size); /var/tmp
# and the home directory are ext4 disks of their own.
_GIB = 1 << 30
DEFAULT_LOCAL: Final = (("/tmp", "tmpfs", 8 * _GIB), ("/var/tmp", "ext4", 64 * _GIB))
HOME_SIZE: Final = 64 * _GIB
_UNITS: Final = {"": 1, "B": 1, "K": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MIB": 1 << 20,
                 "G": 1 << 30, "GIB": 1 << 30, "T": 1 << 40, "TIB": 1 << 40}
_SIZE = re.compile(r"\s*(\d+)\s*([A-Za-z]*)\s*")
# Where a local disk may not be mounted: the host answers these itself.
_HOST_TREES: Final = ("/proc", "/dev", "/sys", "/run")


def parse_size(value: object, where: str) -> int:
    """A size in bytes: an int, or ``"4GiB"``/``"512MiB"``/``"4G"`` (binary units, as
    tmpfs's ``size=`` reads them).

    Raises:
        TypeError: not an int or a str.
        ValueError: no size, or smaller than one 4 KiB block.
    """
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TypeError(f"{where}: a size is an int of bytes or a str such as '4GiB', "
                        f"not {value!r}")
    if isinstance(value, int):
        size = value
    else:
        match = _SIZE.fullmatch(value)
        unit = match.group(2).upper() if match else None
        if match is None or unit not in _UNITS:
            raise ValueError(
                f"{where}: {value!r} is no size; write bytes as an int or a number with one "
                "of the binary units B, KiB, MiB, GiB, TiB (K, M, G, T mean the same), "
                "e.g. '4GiB'")
        size = int(match.group(1)) * _UNITS[unit]
    if size < 4096:
        raise ValueError(f"{where}: {value!r} is smaller than one 4 KiB block; a local "
                         "disk needs at least 4096 bytes")
    return size


def _overlaps(first: str, second: str) -> bool:
    return first == second or first.startswith(second + "/") or second.startswith(first + "/")


def local_mounts(home: str | None, local: object, export: str) -> list[tuple[str, str, int]]:
    """The host's local filesystems: (mount point, type, size in bytes), defaults first.

    ``/tmp`` and ``/var/tmp`` always; the home directory unless it is one of
    them, under the export, or ``/``; then ``local``, a mapping of mount
    points to sizes (``{"/scratch": "4GiB"}``).

    Raises:
        TypeError: ``local`` is not a mapping, or a point is not a str.
        ValueError: a point that is not a clean absolute path, overlaps the
            export, another local disk or a tree the host answers itself,
            or a size that is no size.
    """
    mounts = list(DEFAULT_LOCAL)
    if (home and home.startswith("/") and home != "/" and posixpath.normpath(home) == home
            and not any(_overlaps(home, point) for point, _, _ in mounts)
            and not _overlaps(home, export) and not home.startswith(_HOST_TREES)):
        mounts.append((home, "ext4", HOME_SIZE))
    if local is None:
        return mounts
    if not isinstance(local, Mapping):
        raise TypeError(f"local= maps mount points to sizes, e.g. {{'/scratch': '4GiB'}}, "
                        f"not {local!r}")
    for point, size in local.items():
        where = f"local={{{point!r}: {size!r}}}"
        if not isinstance(point, str):
            raise TypeError(f"{where}: a mount point is an absolute path str, not {point!r}")
        if (not point.startswith("/") or point == "/" or posixpath.normpath(point) != point
                or "\0" in point):
            raise ValueError(f"{where}: a mount point is a clean absolute path other than "
                             "'/', such as '/scratch'")
        if _overlaps(point, export):
            raise ValueError(f"{where}: {point!r} overlaps the export {export!r}; a local "
                             "disk must be outside it (and the export outside the disk)")
        for other, _, _ in mounts:
            if _overlaps(point, other):
                raise ValueError(f"{where}: {point!r} overlaps the local disk {other!r} "
                                 f"(local disks: {', '.join(m[0] for m in mounts)}); "
                                 "nested local mounts are not simulated")
        if any(_overlaps(point, tree) for tree in _HOST_TREES):
            raise ValueError(f"{where}: {point!r} is under {', '.join(_HOST_TREES)}, which "
                             "the host answers itself")
        mounts.append((point, "ext4", parse_size(size, where)))
    return mounts
