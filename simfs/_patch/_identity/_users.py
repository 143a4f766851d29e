"""The user and group databases of a simulated host: root only.

Every simulated process runs as uid 0 and gid 0 and every simulated file is
owned by them (``_ids``), so ``pwd`` and ``grp`` answer for root, with the
entry Debian's base ``/etc/passwd`` and ``/etc/group`` give it.  The real
databases are the test machine's (``getpwuid(1000)`` names a developer on
one machine and nobody on another; ``getpass.getuser()`` falls back to
``pwd.getpwuid(os.getuid())`` when the environment names no user).  Any
other uid, gid or name is ``KeyError`` with the real message.
"""

from __future__ import annotations

import grp
import operator
import os
import pwd
from typing import Any

from ..._engine._scheduler import Process
from ..._os._machine import HOME, USER
from .._registry import in_world, patch
from ._ids import OWNER_ID

ROOT_PASSWD = pwd.struct_passwd((USER, "x", OWNER_ID, OWNER_ID, USER, HOME, "/bin/bash"))
ROOT_GROUP = grp.struct_group((USER, "x", OWNER_ID, []))
_ID_MAX = 2**32 - 1  # uid_t and gid_t are 32-bit; (uid_t) -1 is "no id"


def _as_id(value: Any, kind: str) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{kind} should be integer, not {type(value).__name__}") from None


def _getpwuid(process: Process, uid: Any) -> pwd.struct_passwd:
    number = _as_id(uid, "uid")
    if number == OWNER_ID:
        return ROOT_PASSWD
    if number < -1 or number >= _ID_MAX:
        raise KeyError("getpwuid(): uid not found")  # CPython: an id uid_t cannot hold
    raise KeyError(f"getpwuid(): uid not found: {number}")


def _getpwnam(process: Process, name: Any) -> pwd.struct_passwd:
    if not isinstance(name, str):
        raise TypeError(f"getpwnam() argument must be str, not {type(name).__name__}")
    if name == USER:
        return ROOT_PASSWD
    raise KeyError(f"getpwnam(): name not found: {name!r}")


def _getgrgid(process: Process, gid: Any) -> grp.struct_group:
    number = _as_id(gid, "gid")
    if number == OWNER_ID:
        return ROOT_GROUP
    raise KeyError(f"getgrgid(): gid not found: {number}")


def _getgrnam(process: Process, name: Any) -> grp.struct_group:
    if not isinstance(name, str):
        raise TypeError(f"getgrnam() argument 'name' must be str, not {type(name).__name__}")
    if name == USER:
        return ROOT_GROUP
    raise KeyError(f"getgrnam(): name not found: {name!r}")


def install() -> None:
    patch(pwd, "getpwuid", in_world(pwd.getpwuid, _getpwuid))
    patch(pwd, "getpwnam", in_world(pwd.getpwnam, _getpwnam))
    patch(pwd, "getpwall", in_world(pwd.getpwall, lambda process: [ROOT_PASSWD]))
    patch(grp, "getgrgid", in_world(grp.getgrgid, _getgrgid))
    patch(grp, "getgrnam", in_world(grp.getgrnam, _getgrnam))
    patch(grp, "getgrall", in_world(grp.getgrall, lambda process: [ROOT_GROUP]))
    # No user is in a supplementary group: the list is the given group alone.
    patch(os, "getgrouplist", in_world(os.getgrouplist, lambda process, user, group: [group]))
