"""nfs(5) mount options, parsed into a frozen value with Linux's defaults.

Every option the Linux 6.1 client accepts (``nfs_fs_parameters`` in
fs/nfs/fs_context.c, plus the generic ones mount(8) turns into mount flags)
is accepted here with its meaning, so a whole ``/proc/mounts`` line can be
pasted (``MountOptions.from_proc_mounts``):

- Options that change what the model does set fields: the attribute
  timeouts, ``lookupcache``, ``cto``, ``noac``, ``sync``, ``ro``,
  ``sharecache``, ``lock``/``nolock`` and ``local_lock`` (which locks stay
  on the host), ``rsize``/``wsize``, ``nconnect``, ``timeo``/``retrans``.
- Options that do not change it (``relatime``, ``proto=tcp``, ``sec=sys``,
  ``namlen``, ``mountaddr``, ``addr``...) are kept as given in ``kept``,
  shown by ``format()`` and ``describe()`` with why they change nothing.
- Options whose effect simfs does not model (``nordirplus``, ``write=eager``,
  ``sloppy``, ``migration``...) are refused by name, as is anything unknown,
  so a typo such as ``acdirmn=3`` cannot silently leave the default in place.

Numbers are parsed as the kernel parses them (``fsparam_u32``: kstrtouint
with base 0, so ``0x10`` is 16 and ``010`` is 8; 0 to 4294967295) and
refused where the kernel refuses them, with the range in the error
(``timeo`` 1 to 2147483647, ``nconnect`` 1 to 16, ``mountvers`` 1 to 3,
``port`` and ``mountport`` up to 65535, ``minorversion`` only with v4).
Attribute timeouts above 17179869 s are refused although the kernel takes
them: ``nfs_init_server`` (fs/nfs/client.c) multiplies them by HZ (250 on
Debian's kernel) in an unsigned int, which wraps around (measured in the VM:
see docs/nfs-facts.md, "Mount lines").

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

import ipaddress
import warnings
from dataclasses import dataclass, replace
from typing import Final

from .._errors import MountOptionError, MountOptionWarning

# Linux defaults, nfs(5) "Options supported by all versions".
DEFAULT_ACREGMIN: Final = 3
DEFAULT_ACREGMAX: Final = 60
DEFAULT_ACDIRMIN: Final = 30
DEFAULT_ACDIRMAX: Final = 60
# rsize/wsize: the client asks for NFS_MAX_FILE_IO_SIZE (1 MiB) and takes the
# server's maximum if lower; knfsd's is 1 MiB on a server with 4 GiB of
# memory or more (nfsd_get_default_max_blksize).  Measured: docs/nfs-facts.md.
DEFAULT_IO_SIZE: Final = 1 << 20
MIN_IO_SIZE: Final = 1024  # NFS_MIN_FILE_IO_SIZE
SMALL_IO_SIZE: Final = 4096  # NFS_DEF_FILE_IO_SIZE, what a smaller value becomes

U32_MAX: Final = 4294967295
INT_MAX: Final = 2147483647
HZ: Final = 250  # CONFIG_HZ of Debian's kernels
MAX_ATTR_TIMEOUT: Final = U32_MAX // HZ  # above it, seconds * HZ wraps (nfs_init_server)
NAME_MAX: Final = 255  # knfsd's, and simfs's server's (namlen= in /proc/mounts)
MAX_CONNECTIONS: Final = 16  # NFS_MAX_CONNECTIONS, nfs_fs_context_parse_param

LOOKUPCACHE_MODES: Final = ("all", "positive", "none")
_LOOKUPCACHE_ALIASES: Final = {"all": "all", "positive": "positive", "pos": "positive",
                                "none": "none"}
LOCK_MODES: Final = ("none", "flock", "posix", "all")
# local_lock mode -> (flock local, posix local)
_LOCK_BITS: Final = {"none": (False, False), "flock": (True, False), "posix": (False, True),
                     "all": (True, True)}

_TIMEOUT_OPTIONS: Final = ("acregmin", "acregmax", "acdirmin", "acdirmax", "actimeo")
_FLAGS: Final = ("noac", "ac", "cto", "nocto", "sharecache", "nosharecache", "hard", "soft",
                 "softerr", "ro", "rw", "lock", "nolock", "sync", "async", "v3", "v4", "v4.0",
                 "v4.1", "v4.2")
_VALUED: Final = (*_TIMEOUT_OPTIONS, "vers", "nfsvers", "lookupcache", "timeo", "retrans",
                  "rsize", "wsize", "nconnect", "local_lock")

# Accepted, kept as given, and why none of them changes what simfs models.
_NOATIME = ("the NFS client never updates atime itself (its inodes are S_NOATIME, "
            "nfs_fhget); the server sets it")
_MOUNT_FLAG = "a mount flag for programs, devices and set-id bits, none of which simfs runs"
_USERSPACE = "read by mount(8)/mount.nfs, not by the kernel's NFS client"
_TRANSPORT = "how RPCs travel, not what they answer"
_KEPT_FLAGS: Final = {
    **dict.fromkeys(("relatime", "norelatime", "noatime", "atime", "strictatime",
                     "nostrictatime", "nodiratime", "diratime", "lazytime", "nolazytime"),
                    _NOATIME),
    **dict.fromkeys(("nosuid", "suid", "nodev", "dev", "noexec", "exec", "mand", "nomand"),
                    _MOUNT_FLAG),
    "dirsync": "NFS directory operations reach the server before they return anyway",
    **dict.fromkeys(("defaults", "auto", "noauto", "user", "nouser", "users", "owner",
                     "nofail", "_netdev", "bg", "fg"), _USERSPACE),
    **dict.fromkeys(("tcp", "udp", "rdma", "resvport", "noresvport", "trunkdiscovery",
                     "notrunkdiscovery"), _TRANSPORT),
    **dict.fromkeys(("acl", "noacl"), "the NFSACL side protocol: simfs grants every "
                    "access a mode allows, as with AUTH_SYS and no ACLs"),
    **dict.fromkeys(("fsc", "nofsc"), "FS-Cache keeps file data on a local disk but "
                    "revalidates it by the same change attribute as the page cache"),
    **dict.fromkeys(("intr", "nointr"), "deprecated since Linux 2.6.25 and ignored"),
    **dict.fromkeys(("posix", "noposix"), "NFSv2 mount protocol only"),
    **dict.fromkeys(("softreval", "nosoftreval"), "what a soft mount does when the "
                    "server is unreachable: simfs's server is always reachable"),
    "rdirplus": "READDIRPLUS, the default, which simfs models",
    "nomigration": "the default",
}
_KEPT_VALUED: Final = {
    "proto": _TRANSPORT, "mountproto": _TRANSPORT, "port": _TRANSPORT,
    "mountport": _TRANSPORT, "mountvers": "the MOUNT protocol, used once to get the root "
    "handle", "mounthost": _USERSPACE, "mountaddr": _TRANSPORT, "addr": "the server's "
    "address: simfs has one server", "clientaddr": "the callback address of NFSv4",
    "sec": "simfs authenticates every call as AUTH_SYS would", "namlen": "the server's "
    "maximum name length, 255 on knfsd and in simfs",
    "bsize": "the block size statfs reports", "retry": _USERSPACE, "fsc": "FS-Cache: see fsc",
    "max_connect": _TRANSPORT, "minorversion": "the NFSv4 minor version",
    "write": "write=lazy, the default",
}
# Accepted by Linux, but they change what simfs would have to model: refused.
_REFUSED: Final = {
    "nordirplus": "plain READDIR primes no attributes or dentries, and simfs models "
                  "READDIRPLUS only",
    "sloppy": "it makes the kernel ignore options it does not know; simfs refuses them "
              "by name instead, so drop it",
    "migration": "NFSv4.0 migration only; the kernel refuses it with other versions "
                 "(nfs_fs_context_validate)",
    "v2": "simfs models NFSv3 (NFSv2 is gone from most kernels)",
}
_SEC_FLAVOURS: Final = ("sys", "none", "null", "krb5", "krb5i", "krb5p", "lkey", "lkeyi",
                        "lkeyp", "spkm3", "spkm3i", "spkm3p")
_TRANSPORTS: Final = ("tcp", "tcp6", "udp", "udp6", "rdma", "rdma6")
# NFS versions with a measured profile (simfs/_nfs/_kernels.py): "3.0" is
# the kernel's other spelling of 3.  4.0 and a bare 4 are refused: 4.0 was
# not measured, and 4 lets the client and server settle the minor version.
VERSIONS: Final = {"3": "3", "3.0": "3", "4.1": "4.1", "4.2": "4.2"}
ALLOWED: Final = ", ".join(
    [*(flag for flag in _FLAGS if flag not in ("v4", "v4.0")),
     *(f"{name}=N" for name in _TIMEOUT_OPTIONS), "vers=3|4.1|4.2", "nfsvers=3|4.1|4.2",
     "lookupcache=all|positive|pos|none", "local_lock=none|flock|posix|all", "timeo=N",
     "retrans=N", "rsize=N", "wsize=N", "nconnect=1..16", "what /proc/mounts shows "
     "(relatime, proto=, sec=, namlen=, addr=, mountaddr=, ...; see MountOptions)"]
)


@dataclass(frozen=True, slots=True)
class MountOptions:
    """What one host's NFS client was mounted with.

    Timeouts are whole seconds, as nfs(5) takes them.  ``noac`` is kept as
    its own flag because it also makes writes synchronous.  ``lock`` is
    False under ``nolock`` (no NLM: every lock is local, nfs(5));
    ``local_lock`` says which locks stay on the host ("none", "flock",
    "posix" or "all").  ``rsize``/``wsize`` are the negotiated sizes, as
    /proc/mounts shows them.  ``kept`` holds the options that change nothing
    simfs models, as given; ``describe()`` says why.  ``vers`` is
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
    rsize: int = DEFAULT_IO_SIZE
    wsize: int = DEFAULT_IO_SIZE
    lock: bool = True
    local_lock: str = "none"
    sync: bool = False
    nconnect: int = 1
    kept: tuple[str, ...] = ()
    vers: str = "3"

    @classmethod
    def parse(cls, text: str) -> MountOptions:
        """Parse an nfs(5) option string such as ``"vers=3,acdirmin=3"``.

        Options apply left to right, as the kernel applies them: a later
        ``acdirmin`` overrides an earlier ``actimeo``, and a repeated option's
        last value wins.

        Warns:
            MountOptionWarning: an option given more than once, a minimum
                attribute timeout above its maximum (both accepted, as Linux
                accepts them; see the module docstring), or an ``rsize`` or
                ``wsize`` the kernel rounds.

        Raises:
            MountOptionError: an unknown option, a flag given a value, a
                number the kernel would not take or that is out of its range,
                an NFS version other than 3, 4.1 and 4.2, an unknown ``lookupcache`` or
                ``local_lock`` mode, a lock mode NFSv4 ignores, or an option
                simfs does not model (named, with why).
        """
        known = _PARSED.get(text)
        if known is not None:
            return known
        state = _Parse(cls())
        for raw in text.split(","):
            item = raw.strip()
            if item:
                state.apply(item)
        options = state.finish()
        if not state.warned and len(_PARSED) < _PARSED_KEPT:
            _PARSED[text] = options
        return options

    @classmethod
    def from_proc_mounts(cls, line: str) -> MountOptions:
        """The options of one NFS line of ``/proc/mounts`` (or /etc/fstab),
        verbatim: ``"srv:/export /mnt nfs rw,relatime,vers=3,... 0 0"``.

        Raises:
            MountOptionError: the line is not an NFS mount's, or an option in
                it is refused as ``parse`` refuses it.
        """
        fields = line.split()
        if len(fields) not in (4, 6) or fields[2] not in ("nfs", "nfs4"):
            raise MountOptionError(line.strip(), "not an NFS line of /proc/mounts (expected "
                                   "'SERVER:PATH MOUNTPOINT nfs|nfs4 OPTIONS 0 0')",
                                   "a whole line as /proc/mounts prints it")
        options = fields[3]
        if fields[2] == "nfs4" and not any(item.split("=")[0] in ("vers", "nfsvers")
                                           for item in options.split(",")):
            options = "vers=4," + options  # the type says it: mount -t nfs4
        return cls.parse(options)

    def attr_timeouts_ns(self, is_dir: bool) -> tuple[int, int]:
        """(min, max) attribute cache timeout in ns for a directory or a file."""
        if self.noac:
            return (0, 0)
        if is_dir:
            return (self.acdirmin * 1_000_000_000, self.acdirmax * 1_000_000_000)
        return (self.acregmin * 1_000_000_000, self.acregmax * 1_000_000_000)

    def local_lock_reason(self, kind: str) -> str | None:
        """Why a ``kind`` lock ("flock" or "posix") stays on this host, or None
        when it goes to the server's lock manager (NLM) and excludes other hosts.

        nfs(5), "lock"/"local_lock": such locks "provide exclusion only against
        other applications running on the same client"; fs/nfs/file.c
        ``nfs_flock``/``nfs_lock`` take them with ``locks_lock_file_wait``
        instead of an NLM call.
        """
        flock_local, posix_local = _LOCK_BITS[self.local_lock]
        if not (flock_local if kind == "flock" else posix_local):
            return None
        if not self.lock:
            return ("nolock: no NLM, every flock and lockf lock is local to this host; "
                    "other hosts neither see it nor wait for it")
        return (f"local_lock={self.local_lock}: {kind} locks are local to this host; "
                "other hosts neither see them nor wait for them")

    def describe(self) -> list[str]:
        """What this mount changes in the model, and each kept option with why
        it changes nothing, one line each."""
        lines = [f"mounted {self.format()}"]
        for kind in ("flock", "posix"):
            reason = self.local_lock_reason(kind)
            if reason is not None:
                lines.append(reason)
                break
        if self.sync:
            lines.append("sync: every write reaches the server before it returns")
        for item in self.kept:
            name = item.partition("=")[0]
            why = (_KEPT_FLAGS.get(item) if "=" not in item else _KEPT_VALUED.get(name)) \
                or _USERSPACE
            lines.append(f"{item}: kept, changes nothing simfs models ({why})")
        return lines

    def format(self) -> str:
        """The options as an nfs(5) string that parses back to an equal value."""
        parts = [f"vers={self.vers}", f"acregmin={self.acregmin}", f"acregmax={self.acregmax}",
                 f"acdirmin={self.acdirmin}", f"acdirmax={self.acdirmax}",
                 f"lookupcache={self.lookupcache}", "cto" if self.cto else "nocto",
                 "hard" if self.hard else "soft", "ro" if self.readonly else "rw",
                 "sharecache" if self.sharecache else "nosharecache",
                 f"timeo={self.timeo}", f"retrans={self.retrans}",
                 f"rsize={self.rsize}", f"wsize={self.wsize}", f"nconnect={self.nconnect}",
                 f"local_lock={self.local_lock}" if self.lock else "nolock"]
        if self.noac:
            parts.append("noac")
        if self.sync:
            parts.append("sync")
        parts.extend(self.kept)
        return ",".join(parts)


# Option strings already parsed without a warning (the options are frozen):
# every example of a search mounts its hosts with the same few strings, and
# a parse was a tenth of a two-host world's set-up.
_PARSED: dict[str, MountOptions] = {}
_PARSED_KEPT: Final = 1024


class _Parse:
    """One parse, option by option, as ``nfs_fs_context_parse_param`` goes."""

    def __init__(self, options: MountOptions) -> None:
        self.options = options
        self.seen: dict[str, str] = {}
        self.repeats: list[str] = []
        self.rounded: list[str] = []
        self.kept: dict[str, str] = {}  # name -> item, in order given
        self.version = "3"
        self.version_item = ""
        self.lock_items: list[str] = []
        self.transport_given = False
        self.udp = False
        self.minorversion_item = ""
        self.warned = False  # a warning each time: such a string is parsed again each time

    def apply(self, item: str) -> None:
        name, has_value, value = item.partition("=")
        name = name.strip()
        value = value.strip()
        if name in self.seen and self.seen[name] != item:
            self.repeats.append(f"mount option {name!r} given more than once "
                                f"({self.seen[name]!r}, then {item!r}): the last one wins, "
                                "as in the Linux kernel")
        self.seen[name] = item
        if name in _REFUSED and not has_value:
            raise MountOptionError(item, f"not modelled: {_REFUSED[name]}", ALLOWED)
        if name.startswith("x-") or name == "comment":
            self.kept[name] = item  # mount(8)'s own: fstab comments, x-systemd.*
        elif name in _FLAGS:
            if has_value:
                raise MountOptionError(item, f"{name!r} is a flag and takes no value", ALLOWED)
            self._flag(item, name)
        elif name in _KEPT_FLAGS and not has_value:
            self.kept[name] = item
        elif name in _VALUED:
            self._valued(item, name, _value(item, name, value, bool(has_value)))
        elif name in _KEPT_VALUED:
            self._kept_valued(item, name, _value(item, name, value, bool(has_value)))
        elif name in _KEPT_FLAGS:
            raise MountOptionError(item, f"{name!r} is a flag and takes no value", ALLOWED)
        else:
            raise MountOptionError(item, "unknown or unsupported option", ALLOWED)

    def _flag(self, item: str, name: str) -> None:
        options = self.options
        match name:
            case "noac":
                # nfs(5): noac implies actimeo=0 and synchronous writes.
                options = replace(options, noac=True, acregmin=0, acregmax=0, acdirmin=0,
                                  acdirmax=0)
            case "ac":
                options = replace(options, noac=False)
            case "cto" | "nocto":
                options = replace(options, cto=name == "cto")
            case "sharecache" | "nosharecache":
                options = replace(options, sharecache=name == "sharecache")
            case "hard" | "soft" | "softerr":
                options = replace(options, hard=name == "hard")
            case "ro" | "rw":
                options = replace(options, readonly=name == "ro")
            case "sync" | "async":
                # The generic mount flag: SB_SYNCHRONOUS, and nfs(5) "The sync
                # mount option": every write is flushed before it returns.
                options = replace(options, sync=name == "sync")
            case "lock" | "nolock":
                # nfs_fs_context_parse_param, Opt_lock: nolock sets NONLM and
                # both local flags; lock clears all three.
                self.lock_items.append(item)
                options = replace(options, lock=name == "lock",
                                  local_lock="none" if name == "lock" else "all")
            case _:  # "v3", "v4", "v4.0", "v4.1", "v4.2"
                self.version, self.version_item = name[1:], item
        self.options = options

    def _valued(self, item: str, name: str, value: str) -> None:
        options = self.options
        if name in ("vers", "nfsvers"):
            self.version, self.version_item = value, item
            return
        if name == "lookupcache":
            mode = _LOOKUPCACHE_ALIASES.get(value)
            if mode is None:
                raise MountOptionError(item, f"unknown lookupcache mode {value!r}", ALLOWED)
            self.options = replace(options, lookupcache=mode)
            return
        if name == "local_lock":
            if value not in _LOCK_BITS:
                raise MountOptionError(item, f"unknown local_lock mode {value!r} (nfs(5): "
                                       "none, flock, posix or all)", ALLOWED)
            self.lock_items.append(item)
            # Opt_local_lock: flock/posix/all *add* their flags, none clears both.
            old = _LOCK_BITS[options.local_lock]
            new = _LOCK_BITS[value]
            bits = (False, False) if value == "none" else (old[0] or new[0], old[1] or new[1])
            mode = next(m for m, b in _LOCK_BITS.items() if b == bits)
            self.options = replace(options, local_lock=mode)
            return
        number = _u32(item, name, value)
        if name in _TIMEOUT_OPTIONS:
            if number > MAX_ATTR_TIMEOUT:
                raise MountOptionError(item, f"{number} s is taken by the kernel but wraps "
                                       f"around when multiplied by HZ={HZ} in an unsigned "
                                       "int (nfs_init_server, fs/nfs/client.c), so the "
                                       "timeout would not be what it says; allowed 0 to "
                                       f"{MAX_ATTR_TIMEOUT}", ALLOWED)
            if name == "actimeo":
                self.options = replace(options, acregmin=number, acregmax=number,
                                       acdirmin=number, acdirmax=number)
            else:
                self.options = replace(options, **{name: number})  # type: ignore[arg-type]
            return
        if name == "timeo":
            _in_range(item, number, 1, INT_MAX)
            self.transport_given = True
            self.options = replace(options, timeo=number)
        elif name == "retrans":
            _in_range(item, number, 0, INT_MAX)
            self.transport_given = True
            self.options = replace(options, retrans=number)
        elif name == "nconnect":
            _in_range(item, number, 1, MAX_CONNECTIONS)
            self.options = replace(options, nconnect=number)
        else:  # rsize, wsize
            size = _io_size(number)
            if size != number and number:
                self.rounded.append(f"mount option {item!r}: the kernel uses {size} "
                                    "(nfs_block_size: a power of two from 4096 for values "
                                    "under 1024, up to 1048576)")
            self.options = replace(options, **{name: size})  # type: ignore[arg-type]

    def _kept_valued(self, item: str, name: str, value: str) -> None:
        if name in ("port", "mountport"):
            _in_range(item, _u32(item, name, value), 0, 65535)
        elif name == "mountvers":
            _in_range(item, _u32(item, name, value), 1, 3)
        elif name == "max_connect":
            _in_range(item, _u32(item, name, value), 1, MAX_CONNECTIONS)
        elif name == "minorversion":
            _in_range(item, _u32(item, name, value), 0, 2)
            self.minorversion_item = item if _u32(item, name, value) else ""
        elif name == "namlen":
            if _u32(item, name, value) != NAME_MAX:
                raise MountOptionError(item, f"not modelled: simfs's server allows names of "
                                       f"{NAME_MAX} bytes, as knfsd does (namlen={NAME_MAX})",
                                       ALLOWED)
        elif name == "bsize":
            _u32(item, name, value)
        elif name in ("addr", "mountaddr"):
            try:
                ipaddress.ip_address(value.partition("%")[0])
            except ValueError:
                raise MountOptionError(item, f"{name} takes an IP address (the kernel's "
                                       "rpc_pton: 'NFS: Bad IP address specified')",
                                       ALLOWED) from None
        elif name in ("proto", "mountproto"):
            allowed = _TRANSPORTS if name == "proto" else _TRANSPORTS[:4]
            if value not in allowed:
                raise MountOptionError(item, f"unrecognized transport protocol; {name} "
                                       f"takes {'|'.join(allowed)}", ALLOWED)
            if name == "proto":
                self.udp = value.startswith("udp")
        elif name == "sec":
            for flavour in value.split(":"):
                if flavour and flavour not in _SEC_FLAVOURS:
                    raise MountOptionError(item, f"sec={flavour} not recognized; flavours: "
                                           f"{'|'.join(_SEC_FLAVOURS)}", ALLOWED)
        elif name == "write":
            if value in ("eager", "wait"):
                raise MountOptionError(item, f"not modelled: write={value} sends writes "
                                       "to the server as they are made; simfs models "
                                       "write=lazy, the default", ALLOWED)
            if value != "lazy":
                raise MountOptionError(item, "write takes lazy|eager|wait", ALLOWED)
        self.kept[name] = item

    def finish(self) -> MountOptions:
        options = self.options
        if self.version.startswith("4"):
            local = [item for item in self.lock_items if item != "local_lock=none"]
            if local:
                raise MountOptionError(local[-1], "NFSv4 has no local lock modes: the "
                                       "Linux client clears nolock and local_lock on a v4 "
                                       "mount (nfs_fs_context_validate), so its locks go "
                                       "to the server and exclude other hosts; measured: "
                                       "/proc/mounts shows local_lock=none", ALLOWED)
        version = self.version
        if self.minorversion_item:
            if not version.startswith("4"):
                raise MountOptionError(self.minorversion_item, "a minor version needs vers=4 "
                                       "(nfs_fs_context_validate: 'Mount option vers=3 does "
                                       "not support minorversion')", ALLOWED)
            if version == "4":  # vers=4,minorversion=1 is vers=4.1
                version = "4." + self.minorversion_item.partition("=")[2].lstrip("+0") or "0"
        vers = VERSIONS.get(version)
        if vers is None:
            hint = (" (vers=4 lets client and server settle the minor version: name it)"
                    if version == "4" else "")
            raise MountOptionError(self.version_item or self.minorversion_item,
                                   f"NFS version {version!r} has no measured profile; simfs "
                                   f"models vers=3, vers=4.1 and vers=4.2{hint}", ALLOWED)
        options = replace(options, vers=vers)
        if not options.lock and options.local_lock != "all":
            raise MountOptionError(self.lock_items[-1], "nolock followed by "
                                   f"local_lock={options.local_lock}: NONLM stays set while "
                                   "some locks are no longer local, which neither nfs(5) "
                                   "describes nor simfs models (use nolock alone, or "
                                   "local_lock= alone)", ALLOWED)
        if self.udp and not self.transport_given:
            # NFS_DEF_UDP_TIMEO and NFS_DEF_UDP_RETRANS (include/uapi/linux/nfs_fs.h).
            options = replace(options, timeo=11, retrans=3)
        options = replace(options, kept=tuple(self.kept.values()))
        for message in [*self.repeats, *self.rounded]:  # only once the whole string is valid
            self.warned = True
            _warn(message)
        for kind, low, high in (("acreg", options.acregmin, options.acregmax),
                                ("acdir", options.acdirmin, options.acdirmax)):
            if low > high:
                self.warned = True
                _warn(f"mount options {kind}min={low} > {kind}max={high}: accepted, as the "
                      f"Linux kernel accepts it; attributes are trusted {low} s after a "
                      f"change, then {high} s after each unchanged revalidation")
        return options


def _value(item: str, name: str, value: str, has_value: bool) -> str:
    if not has_value or not value:
        raise MountOptionError(item, f"{name!r} needs a value", ALLOWED)
    return value


def _u32(item: str, name: str, value: str) -> int:
    """``value`` as the kernel's kstrtouint(value, 0) reads it, or a refusal.

    Base 0: ``0x``/``0X`` then hex digits is hexadecimal, a leading 0 octal,
    else decimal; one leading ``+`` is allowed; nothing else.
    """
    text = value[1:] if value.startswith("+") else value
    base, digits = 10, text
    if text[:2].lower() == "0x" and len(text) > 2:
        base, digits = 16, text[2:]
    elif text.startswith("0") and len(text) > 1:
        base, digits = 8, text[1:]
    alphabet = "0123456789abcdef"[:base]
    if not digits or any(char not in alphabet for char in digits.lower()):
        raise MountOptionError(item, f"{name!r} takes a whole number from 0 to {U32_MAX} "
                               "(decimal, 0x hex or 0 octal, as the kernel's fsparam_u32 "
                               "reads it)", ALLOWED)
    number = int(digits, base)
    if number > U32_MAX:
        raise MountOptionError(item, f"{name!r} is out of range: the kernel takes 0 to "
                               f"{U32_MAX} (fsparam_u32: 'Bad value for {name!r}')", ALLOWED)
    return number


def _in_range(item: str, number: int, low: int, high: int) -> None:
    if not low <= number <= high:
        name = item.partition("=")[0]
        raise MountOptionError(item, f"value for {name!r} out of range: allowed {low} to "
                               f"{high} (nfs_fs_context_parse_param: 'NFS: Value for "
                               f"{name!r} out of range')", ALLOWED)


def _io_size(number: int) -> int:
    """rsize/wsize as fs/nfs/internal.h ``nfs_block_size`` turns them into the
    size used (0: the default, the server's maximum)."""
    if number == 0:
        return DEFAULT_IO_SIZE
    if number < MIN_IO_SIZE:
        return SMALL_IO_SIZE
    if number >= DEFAULT_IO_SIZE:
        return DEFAULT_IO_SIZE
    return 1 << (number.bit_length() - 1)


def _warn(message: str) -> None:
    # stacklevel 5: finish -> parse -> World.host -> the user's call.
    warnings.warn(message, MountOptionWarning, stacklevel=5)
