"""Path resolution across symbolic links: the VFS walk over NFS lookups.

Linux resolves a path one component at a time (fs/namei.c,
``link_path_walk``): each directory must be searchable, each name is one
dentry lookup (the NFS client's rules, ``_lookup.py``), and a name that is
a symbolic link is replaced by its target (``pick_link``): a relative target
continues from the link's directory, an absolute one from the root.  A final
link is followed unless the call says not to (``lstat``, ``readlink``,
``unlink``, ``rename``, ``O_NOFOLLOW``).  More than ``MAXSYMLINKS`` (40,
include/linux/namei.h) links in one resolution is ``ELOOP``.

The export is the world's whole filesystem: an absolute target outside it,
or a ``..`` that climbs above it, would reach the real machine, so it is a
``SimulationEscape`` naming the link's target, never a real lookup.

A walk without links sends exactly the calls the plain walk sends
(``NfsClient.walk``): the same GETATTR/ACCESS/LOOKUP sequence, so a run that
makes no link traces as before.
"""

from __future__ import annotations

import errno
import os
from typing import TYPE_CHECKING, Final

from .._errors import simulated_oserror
from .._nfs import _client as nfs

if TYPE_CHECKING:
    from .._engine._scheduler import ProcessGroup
    from .._errors import SimulationEscape
    from .._nfs._client import NfsClient
    from .._nfs._server import Attrs
    from ._seam import PathArg

MAXSYMLINKS: Final = 40  # include/linux/namei.h: links followed in one resolution


# include/uapi/linux/limits.h: a path's bytes, its terminating NUL included.
PATH_MAX: Final = 4096
_SHORT_PATH: Final = PATH_MAX // 4  # fewer characters than this cannot make PATH_MAX bytes


def path_text(raw: str | bytes) -> str:
    """A path argument's text (``os.fspath``'s result), as every filesystem takes it.

    Raises:
        FileNotFoundError: the empty path (getname(): ENOENT, naming ``raw``).
        ValueError: a NUL in the path, as os and open raise for a str path
            (for bytes, os.* prefixes the function's name; here it reads as
            open's message).
    """
    text = os.fsdecode(raw) if isinstance(raw, bytes) else raw
    if not text:
        raise simulated_oserror(errno.ENOENT, raw)
    if "\x00" in text:
        raise ValueError("embedded null byte")
    return text


def check_path_length(text: str, named: str | bytes | None = None) -> None:
    """getname() (fs/namei.c): a path of PATH_MAX bytes or more, with its NUL,
    is ENAMETOOLONG before any walk; a symlink's target is taken the same way."""
    if len(text) >= _SHORT_PATH and len(os.fsencode(text)) >= PATH_MAX:
        raise simulated_oserror(errno.ENAMETOOLONG, named)


class Walk:
    """Where one path walk stands (the kernel's ``nameidata``).

    ``attrs`` is the directory reached; ``name`` the last component, not yet
    looked up (``None`` once the walk ends on ``attrs`` itself, as a target
    of ``..`` does).  ``below``/``ancestors`` are the names and directories
    descended since ``base``, the physical path of the walk's start under the
    export (``None`` until a ``..`` needs it), so ``..`` in a link's target
    climbs the directories really walked, as Linux does.
    """

    __slots__ = ("ancestors", "attrs", "base", "below", "links", "name", "pending", "target")

    def __init__(self, attrs: Attrs, pending: list[str], base: list[str] | None) -> None:
        self.attrs = attrs
        self.pending = pending  # reversed: pop() gives the next component
        self.name: str | None = None
        self.base = base
        self.below: list[str] = []
        self.ancestors: list[Attrs] = []
        self.links = 0
        self.target = ""  # the last link target entered, for an escape's message


class PathWalk:
    """Symlink-aware resolution for ``Syscalls`` (state declared for mypy)."""

    _client: NfsClient
    _group: ProcessGroup
    _export: str
    export_prefix: str

    def escape(self, what: str) -> SimulationEscape:
        raise NotImplementedError

    def _path(self, path: PathArg, dir_fd: int | None = None) -> tuple[str, int, list[str]]:
        """(path as shown, start file id, components under it): ``Syscalls._path``."""
        raise NotImplementedError

    def _begin(self, start: int, components: list[str]) -> Walk:
        """A walk standing at ``start`` (or the export root after ``UP_FROM_START``)."""
        client = self._client
        attrs = client.getattr(start)
        base: list[str] | None = [] if start == client.root else None
        if components and components[0] == nfs.UP_FROM_START:
            client._check_access(attrs)
            attrs = client.getattr(client.root)
            components = components[1:]
            base = []
        return Walk(attrs, components[::-1], base)

    def _to_last(self, walk: Walk) -> None:
        """Resolve all but the last component, following every link met."""
        client = self._client
        pending = walk.pending
        while pending:
            name = pending.pop()
            attrs = walk.attrs
            if not attrs.is_dir:
                raise simulated_oserror(errno.ENOTDIR)
            client._check_access(attrs)
            if name == "..":
                self._up(walk)
                continue
            if name == ".":
                continue
            if not pending:
                walk.name = name
                return
            child = client.lookup(attrs.fileid, name)
            if child.is_link:
                self._enter_link(walk, child)
                continue
            walk.ancestors.append(attrs)
            walk.below.append(name)
            walk.attrs = child
        walk.name = None

    def _enter_link(self, walk: Walk, link: Attrs) -> None:
        """Replace a link by its target (``pick_link``); its directory is ``walk.attrs``."""
        walk.links += 1
        if walk.links > MAXSYMLINKS:
            raise simulated_oserror(errno.ELOOP)
        target = self._client.readlink(link)
        if not target:
            raise simulated_oserror(errno.ENOENT)  # an empty target names nothing
        walk.target = target
        parts = [part for part in target.split("/") if part and part != "."]
        if target.endswith("/") and parts:
            parts.append(".")  # a trailing slash: the target must be a directory
        if target.startswith("/"):
            mount = [part for part in self._export.split("/") if part]
            if parts[:len(mount)] != mount:
                raise self.escape(f"symbolic link to {target!r} leads outside the export "
                                  f"{self._export!r}")
            parts = parts[len(mount):]
            client = self._client
            walk.attrs = client.getattr(client.root)
            walk.base, walk.below, walk.ancestors = [], [], []
        walk.pending.extend(reversed(parts))

    def _up(self, walk: Walk) -> None:
        """``..`` in a link's target: the parent of the directory really walked."""
        client = self._client
        if walk.below:
            walk.below.pop()
            walk.attrs = client.getattr(walk.ancestors.pop().fileid)
            return
        base = walk.base if walk.base is not None else self._cwd_below_export()
        if not base:
            raise self.escape(f"symbolic link to {walk.target!r} climbs above the export "
                              f"{self._export!r}")
        walk.base = base[:-1]
        walk.attrs = client.walk(client.root, walk.base)

    def _cwd_below_export(self) -> list[str]:
        cwd = self._group.cwd
        if cwd == self._export:
            return []
        if not cwd.startswith(self.export_prefix):
            raise self.escape(f"working directory {cwd!r} is outside the export")
        return cwd[len(self.export_prefix):].split("/")

    def _last(self, walk: Walk, *, follow: bool, intent: int) -> Attrs:
        """Look the last component up, following a final link if ``follow``."""
        client = self._client
        while True:
            if walk.name is None:
                force = bool(intent & nfs.OPEN) and client.options.cto
                return client.getattr(walk.attrs.fileid, force=force)
            attrs = client.lookup(walk.attrs.fileid, walk.name, intent)
            if not (follow and attrs.is_link):
                return attrs
            self._enter_link(walk, attrs)
            self._to_last(walk)

    def _resolve(self, start: int, components: list[str], *, follow: bool = True,
                 intent: int = 0) -> Attrs:
        """The object a path names (a final link followed unless ``follow`` is False)."""
        client = self._client
        if components and components[-1] in nfs.LAST_MARKERS:
            # "x/" and "x/.": x, its link followed, and it must be a directory
            # (path_resolution(7)).
            attrs = self._resolve(start, components[:-1], follow=True, intent=intent)
            if not attrs.is_dir:
                raise simulated_oserror(errno.ENOTDIR)
            return attrs
        if not components:
            force = bool(intent & nfs.OPEN) and client.options.cto
            return client.getattr(start, force=force)
        if components[0] == nfs.UP_FROM_START:
            walk = self._begin(start, components)
            self._to_last(walk)
            return self._last(walk, follow=follow, intent=intent)
        # The common case, as lean as NfsClient.walk (pollers stat in loops):
        # the general walk takes over only where a link stands.
        attrs = client.getattr(start)
        last = len(components) - 1
        for index, name in enumerate(components):
            if not attrs.is_dir:
                raise simulated_oserror(errno.ENOTDIR)
            client._check_access(attrs)
            child = client.lookup(attrs.fileid, name, intent if index == last else 0)
            if child.is_link and (follow or index < last):
                base = [] if start == client.root else self._cwd_below_export()
                walk = Walk(attrs, components[:index:-1], [*base, *components[:index]])
                self._enter_link(walk, child)
                self._to_last(walk)
                return self._last(walk, follow=follow, intent=intent)
            attrs = child
        return attrs

    def _resolve_physical(self, start: int, components: list[str]) -> tuple[Attrs, str | None]:
        """(object, its path with every link resolved) for chdir; the path is
        None when no link was met, so the path as written stands.

        getcwd(2) returns the directory's real path (the dentry's d_path),
        never the link that led to it.
        """
        if components and components[-1] in nfs.LAST_MARKERS:
            components = components[:-1]  # chdir's target is a directory already
        if not components:
            return self._client.getattr(start), None
        walk = self._begin(start, components)
        self._to_last(walk)
        attrs = self._last(walk, follow=True, intent=0)
        if not walk.links:
            return attrs, None
        base = walk.base if walk.base is not None else self._cwd_below_export()
        names = [*base, *walk.below, *([walk.name] if walk.name is not None else [])]
        return attrs, "/".join([self._export, *names])

    def _parent(self, start: int, components: list[str], root_errno: int,
                dotdot_errno: int | None = None, dot_errno: int | None = None
                ) -> tuple[int, str]:
        """(directory, last name) for a call that acts on a name, not through it.

        A path ending in ``..`` or ``.`` names no entry to make or remove:
        once the directory is reached Linux refuses it (fs/namei.c,
        ``last_type`` LAST_DOTDOT, LAST_DOT): EEXIST for mkdir and link, EBUSY
        for rename, EISDIR for unlink, and for rmdir ENOTEMPTY and EINVAL
        (``dotdot_errno``, ``dot_errno`` where they differ from the export
        root's ``root_errno``).  A trailing slash is dropped here; the calls
        it restricts check it themselves (``_slashed``).
        """
        if components and components[-1] in nfs.LAST_MARKERS:
            if components[-1] == nfs.LAST_DOT:
                self._resolve(start, components, follow=True)  # the directory, or its error
                raise simulated_oserror(root_errno if dot_errno is None else dot_errno)
            components = components[:-1]
        walk = self._parent_walk(start, components, root_errno)
        if walk.name is None:
            raise simulated_oserror(root_errno if dotdot_errno is None else dotdot_errno)
        return walk.attrs.fileid, walk.name

    @staticmethod
    def _slashed(components: list[str]) -> bool:
        """Whether the path as written ended in a slash (its object must be a directory)."""
        return bool(components) and components[-1] == nfs.LAST_SLASH

    def _parent_walk(self, start: int, components: list[str], root_errno: int) -> Walk:
        """A walk stopped before the last name: where a create or remove acts."""
        if not components or components == [nfs.UP_FROM_START]:
            raise simulated_oserror(root_errno)
        walk = self._begin(start, components)
        self._to_last(walk)
        return walk
