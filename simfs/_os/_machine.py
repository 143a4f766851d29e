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
  library's local time uses during a run (see ``_patch/_clocks/_tz.py``);
- ``HOSTNAME``: the host's name, as Docker sets it in every container.

No ``TERM``, ``COLUMNS`` or ``LINES``: a simulated process runs as a batch
job, without a terminal.  ``World(env=)`` changes this for every process and
``spawn(..., env=)`` for one; a value of None removes a variable.

The world merges them here and hands the result to the process group
(``ProcessGroup.environ``, ``native`` and ``limits``), which the routes
read: this module sits below the world and the routes, beside the syscalls.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import os
import zoneinfo
from collections.abc import Callable, Mapping
from typing import Any

# oci.DefaultPathEnv("linux") in moby (daemon/oci), the PATH of a container
# whose image sets none; Debian's /etc/profile gives root the same.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The world's user: root, the owner of every simulated file (see _patch/_identity/_ids.py).
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
