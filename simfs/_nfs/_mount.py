"""nfs(5) mount options, parsed into a frozen value with Linux's defaults.

Only options whose effect simfs models, or that are harmless to accept
(``hard``, ``timeo``), are allowed; anything else is refused by name, so a
typo such as ``acdirmn=3`` cannot silently leave the default in place.

Two things Linux accepts are accepted here too, with a ``MountOptionWarning``:

- A repeated option: the last one wins.  The kernel's
  ``nfs_fs_context_parse_param`` (fs/nfs/fs_context.c) handles each option
  in turn and assigns its field (``ctx->acdirmin = result.uint_32``), so a
  later value overwrites an earlier one; nothing records that it was seen.
- A minimum above its maximum (``acdirmin=60,acdirmax=10``): nothing clamps
  or rejects it at mount time (``nfs_init_server`` in fs/nfs/client.c copies
  the four values as given).  At run time ``nfs_update_inode`` (fs/nfs/inode.c)
  sets ``attrtimeo`` to the minimum after a change and, after an unchanged
  revalidation, doubles it and caps it at the maximum: the first timeout
  after a change is ``acdirmin``, later ones ``acdirmax``.  The client model
  applies the same rule (``NfsClient``), so the values are kept as given.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from typing import Final

from .._errors import MountOptionError, MountOptionWarning

# Linux defaults, nfs(5) "Options supported by all versions".
DEFAULT_ACREGMIN: Final = 3
DEFAULT_ACREGMAX: Final = 60
DEFAULT_ACDIRMIN: Final = 30
DEFAULT_ACDIRMAX: Final = 60

LOOKUPCACHE_MODES: Final = ("all", "positive", "none")
_LOOKUPCACHE_ALIASES: Final = {"all": "all", "positive": "positive", "pos": "positive",
                                "none": "none"}

_TIMEOUT_OPTIONS: Final = ("acregmin", "acregmax", "acdirmin", "acdirmax", "actimeo")
_FLAGS: Final = ("noac", "ac", "cto", "nocto", "sharecache", "nosharecache", "hard", "soft",
                 "ro", "rw")
_VALUED: Final = (*_TIMEOUT_OPTIONS, "vers", "nfsvers", "lookupcache", "timeo", "retrans")
# NFS versions with a measured profile (simfs/_nfs/_kernels.py): "3.0" is
# the kernel's other spelling of 3.  4.0 and a bare 4 are refused: 4.0 was
# not measured, and 4 lets the client and server settle the minor version.
VERSIONS: Final = {"3": "3", "3.0": "3", "4.1": "4.1", "4.2": "4.2"}
ALLOWED: Final = ", ".join(
    [*_FLAGS, *(f"{name}=N" for name in _TIMEOUT_OPTIONS), "vers=3|4.1|4.2", "nfsvers=3|4.1|4.2",
     "lookupcache=all|positive|pos|none", "timeo=N", "retrans=N"]
)


@dataclass(frozen=True, slots=True)
class MountOptions:
    """What one host's NFS client was mounted with.

    Timeouts are whole seconds, as nfs(5) takes them.  ``noac`` is kept as
    its own flag because it also makes writes synchronous.  ``vers`` is
    ``"3"``, ``"4.1"`` or ``"4.2"``; the host's profile follows from it
    (``simfs/_nfs/_kernels.py``).
    """

    acregmin: int = DEFAULT_ACREGMIN
    acregmax: int = DEFAULT_ACREGMAX
    acdirmin: int = DEFAULT_ACDIRMIN
    acdirmax: int = DEFAULT_ACDIRMAX
    lookupcache: str = "all"
    cto: bool = True
    noac: bool = False
    sharecache: bool = True
    hard: bool = True
    readonly: bool = False
    timeo: int = 600  # tenths of a second, nfs(5) default for TCP
    retrans: int = 2
    vers: str = "3"

    @classmethod
    def parse(cls, text: str) -> MountOptions:
        """Parse an nfs(5) option string such as ``"vers=3,acdirmin=3"``.

        Options apply left to right, as the kernel applies them: a later
        ``acdirmin`` overrides an earlier ``actimeo``, and a repeated option's
        last value wins.

        Warns:
            MountOptionWarning: an option given more than once, or a minimum
                attribute timeout above its maximum (both accepted, as Linux
                accepts them; see the module docstring).

        Raises:
            MountOptionError: an unknown option, a flag given a value, a value
                that is not a non-negative integer, an NFS version other than
                3, 4.1 and 4.2, or an unknown ``lookupcache`` mode.
        """
        options = cls()
        seen: dict[str, str] = {}
        repeats: list[str] = []
        for raw in text.split(","):
            item = raw.strip()
            if not item:
                continue
            name, has_value, value = item.partition("=")
            name = name.strip()
            value = value.strip()
            if name in seen and seen[name] != item:
                repeats.append(f"mount option {name!r} given more than once ({seen[name]!r}, "
                               f"then {item!r}): the last one wins, as in the Linux kernel")
            seen[name] = item
            if name in _FLAGS:
                if has_value:
                    raise MountOptionError(item, f"{name!r} is a flag and takes no value", ALLOWED)
                options = _apply_flag(options, name)
            elif name in _VALUED:
                if not has_value or not value:
                    raise MountOptionError(item, f"{name!r} needs a value", ALLOWED)
                options = _apply_valued(options, item, name, value)
            else:
                raise MountOptionError(item, "unknown or unsupported option", ALLOWED)
        for message in repeats:  # only once the whole string is known to be valid
            _warn(message)
        for kind, low, high in (("acreg", options.acregmin, options.acregmax),
                                ("acdir", options.acdirmin, options.acdirmax)):
            if low > high:
                _warn(f"mount options {kind}min={low} > {kind}max={high}: accepted, as the "
                      f"Linux kernel accepts it; attributes are trusted {low} s after a "
                      f"change, then {high} s after each unchanged revalidation")
        return options

    def attr_timeouts_ns(self, is_dir: bool) -> tuple[int, int]:
        """(min, max) attribute cache timeout in ns for a directory or a file."""
        if self.noac:
            return (0, 0)
        if is_dir:
            return (self.acdirmin * 1_000_000_000, self.acdirmax * 1_000_000_000)
        return (self.acregmin * 1_000_000_000, self.acregmax * 1_000_000_000)

    def format(self) -> str:
        """The options as an nfs(5) string that parses back to an equal value."""
        parts = [f"vers={self.vers}", f"acregmin={self.acregmin}", f"acregmax={self.acregmax}",
                 f"acdirmin={self.acdirmin}", f"acdirmax={self.acdirmax}",
                 f"lookupcache={self.lookupcache}", "cto" if self.cto else "nocto",
                 "hard" if self.hard else "soft", "ro" if self.readonly else "rw",
                 "sharecache" if self.sharecache else "nosharecache",
                 f"timeo={self.timeo}", f"retrans={self.retrans}"]
        if self.noac:
            parts.append("noac")
        return ",".join(parts)


def _warn(message: str) -> None:
    # stacklevel 4: parse -> World.host -> the user's call.
    warnings.warn(message, MountOptionWarning, stacklevel=4)


def _apply_flag(options: MountOptions, name: str) -> MountOptions:
    match name:
        case "noac":
            # nfs(5): noac implies actimeo=0 and synchronous writes.
            return replace(options, noac=True, acregmin=0, acregmax=0, acdirmin=0, acdirmax=0)
        case "ac":
            return replace(options, noac=False)
        case "cto" | "nocto":
            return replace(options, cto=name == "cto")
        case "sharecache" | "nosharecache":
            return replace(options, sharecache=name == "sharecache")
        case "hard" | "soft":
            return replace(options, hard=name == "hard")
        case _:  # "ro" | "rw"
            return replace(options, readonly=name == "ro")


def _apply_valued(options: MountOptions, item: str, name: str, value: str) -> MountOptions:
    if name in ("vers", "nfsvers"):
        vers = VERSIONS.get(value)
        if vers is None:
            hint = (" (vers=4 lets client and server settle the minor version: name it)"
                    if value == "4" else "")
            raise MountOptionError(item, f"NFS version {value!r} has no measured profile; "
                                   f"simfs models vers=3, vers=4.1 and vers=4.2{hint}",
                                   ALLOWED)
        return replace(options, vers=vers)
    if name == "lookupcache":
        mode = _LOOKUPCACHE_ALIASES.get(value)
        if mode is None:
            raise MountOptionError(item, f"unknown lookupcache mode {value!r}", ALLOWED)
        return replace(options, lookupcache=mode)
    if not value.isdigit():
        raise MountOptionError(item, f"{name!r} takes a non-negative whole number", ALLOWED)
    number = int(value)
    if name == "actimeo":
        return replace(options, acregmin=number, acregmax=number, acdirmin=number,
                       acdirmax=number)
    timeouts: dict[str, int] = {name: number}
    return replace(options, **timeouts)  # type: ignore[arg-type]
