"""The namespace half of the syscall layer: directories, names and links.

``Syscalls`` (``_syscalls.py``) inherits these: listing, mkdir/rmdir,
unlink/rename/link, symlink/readlink and chdir.  Each resolves its paths
with the symlink-aware walk (``_namei.py``) and acts through the host's
``NfsClient``, in the call shape ``_run`` gives every syscall.
"""

from __future__ import annotations

import errno
import os
import posixpath
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from .._errors import simulated_oserror
from ._dirent import SimDirEntry, SimScandirIterator
from ._namei import PathWalk, check_path_length
from ._seam import PathArg

if TYPE_CHECKING:
    from .._engine._scheduler import ProcessGroup
    from .._nfs._client import NfsClient
    from .._nfs._server import Attrs
    from ._files import OpenFile

T = TypeVar("T")


class DirectoryCalls(PathWalk):
    """listdir/scandir/mkdir/rmdir/unlink/rename/link/readlink/symlink/chdir."""

    _client: NfsClient
    _group: ProcessGroup

    def _run(self, op: str, shown: str, effect: Callable[[], T], path: object = None,
             path2: object = None) -> T:
        raise NotImplementedError

    def _open_target(self, start: int, components: list[str]) -> Attrs:
        raise NotImplementedError

    def _file(self, fd: int) -> OpenFile:
        raise NotImplementedError

    def stat(self, path: PathArg | int, *, dir_fd: int | None = None,
             follow_symlinks: bool = True) -> os.stat_result:
        raise NotImplementedError

    def listdir(self, path: PathArg | int = ".") -> list[str] | list[bytes]:
        names = [name for name, _ in self._listing("listdir", path)[1]]
        if isinstance(path, bytes):  # a bytes path lists bytes names, as os.listdir does
            return [os.fsencode(name) for name in names]
        return names

    def scandir(self, path: PathArg | int = ".") -> SimScandirIterator:
        base, listing = self._listing("scandir", path)
        if isinstance(path, int):
            dir_fd = path
            return SimScandirIterator([
                SimDirEntry(name, name, attrs,
                            lambda p, follow: self.stat(p, dir_fd=dir_fd, follow_symlinks=follow))
                for name, attrs in listing])
        return SimScandirIterator([
            SimDirEntry(name, posixpath.join(base, name), attrs,
                        lambda p, follow: self.stat(p, follow_symlinks=follow))
            for name, attrs in listing])

    def _listing(self, op: str, path: PathArg | int) -> tuple[str, list[tuple[str, Attrs]]]:
        """(path as the caller wrote it, entries) for listdir and scandir."""
        if isinstance(path, int):
            open_file = self._file(path)
            return "", self._run(op, open_file.path,
                                 lambda: self._client.readdir(open_file.fileid, revalidate=False))
        written = os.fspath(path)
        if isinstance(written, bytes):
            written = os.fsdecode(written)
        shown, start, components = self._path(path)

        def effect() -> list[tuple[str, Attrs]]:
            attrs = self._open_target(start, components)
            return self._client.readdir(attrs.fileid, revalidate=False)

        return written, self._run(op, shown, effect, path)

    def mkdir(self, path: PathArg, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        shown, start, components = self._path(path, dir_fd)

        def effect() -> None:
            self._writable_mount()
            parent, name = self._parent(start, components, errno.EEXIST)
            self._client.mkdir(parent, name, mode & ~self._group.umask)

        self._run("mkdir", shown, effect, path)

    def rmdir(self, path: PathArg, *, dir_fd: int | None = None) -> None:
        shown, start, components = self._path(path, dir_fd)

        def effect() -> None:
            self._writable_mount()
            parent, name = self._parent(start, components, errno.EBUSY, errno.ENOTEMPTY,
                                        errno.EINVAL)
            self._client.rmdir(parent, name)

        self._run("rmdir", shown, effect, path)

    def unlink(self, path: PathArg, *, dir_fd: int | None = None) -> None:
        shown, start, components = self._path(path, dir_fd)

        def effect() -> None:
            self._writable_mount()
            parent, name = self._parent(start, components, errno.EISDIR)
            if self._slashed(components):
                # do_unlinkat: a name written with a trailing slash is never
                # removed; ENOENT, EISDIR or ENOTDIR by what it names.
                raise simulated_oserror(errno.EISDIR if self._client.lookup(parent, name).is_dir
                                        else errno.ENOTDIR)
            self._client.unlink(parent, name)

        self._run("unlink", shown, effect, path)

    def rename(self, source: PathArg, target: PathArg, *, src_dir_fd: int | None = None,
               dst_dir_fd: int | None = None) -> None:
        source_shown, source_start, source_parts = self._path(source, src_dir_fd)
        target_shown, target_start, target_parts = self._path(target, dst_dir_fd)

        def effect() -> None:
            self._writable_mount()
            from_dir, from_name = self._parent(source_start, source_parts, errno.EBUSY)
            to_dir, to_name = self._parent(target_start, target_parts, errno.EBUSY)
            if ((self._slashed(source_parts) or self._slashed(target_parts))
                    and not self._client.lookup(from_dir, from_name).is_dir):
                raise simulated_oserror(errno.ENOTDIR)  # do_renameat2: slashes need directories
            self._client.rename(from_dir, from_name, to_dir, to_name)

        self._run("rename", f"{source_shown} -> {target_shown}", effect, source, target)

    def link(self, source: PathArg, target: PathArg, *, src_dir_fd: int | None = None,
             dst_dir_fd: int | None = None, follow_symlinks: bool = True) -> None:
        source_shown, source_start, source_parts = self._path(source, src_dir_fd)
        target_shown, target_start, target_parts = self._path(target, dst_dir_fd)

        def effect() -> None:
            self._writable_mount()
            fileid = self._resolve(source_start, source_parts, follow=follow_symlinks).fileid
            to_dir, to_name = self._parent(target_start, target_parts, errno.EEXIST)
            self._new_name_unslashed(target_parts, to_dir, to_name)
            self._client.link(fileid, to_dir, to_name)

        self._run("link", f"{source_shown} -> {target_shown}", effect, source, target)

    def readlink(self, path: PathArg, *, dir_fd: int | None = None) -> str | bytes:
        shown, start, components = self._path(path, dir_fd)

        def effect() -> str:
            attrs = self._resolve(start, components, follow=False)
            if not attrs.is_link:
                raise simulated_oserror(errno.EINVAL)
            return self._client.readlink(attrs)

        target = self._run("readlink", shown, effect, path)
        return os.fsencode(target) if isinstance(os.fspath(path), bytes) else target

    def symlink(self, target: PathArg, path: PathArg, target_is_directory: bool = False, *,
                dir_fd: int | None = None) -> None:
        """A link at ``path`` holding ``target`` verbatim (SYMLINK); the target
        need not exist and is not resolved until the link is followed."""
        text = os.fspath(target)
        if isinstance(text, bytes):
            text = os.fsdecode(text)
        if "\x00" in text:
            raise ValueError("embedded null byte")
        # do_symlinkat takes the target with getname() first (a 1025-byte
        # target works, a 4096-byte one does not: measured in the VM).
        check_path_length(text)
        shown, start, components = self._path(path, dir_fd)

        def effect() -> None:
            if not text:
                raise simulated_oserror(errno.ENOENT)  # symlink(2): an empty target
            self._writable_mount()
            parent, name = self._parent(start, components, errno.EEXIST)
            self._new_name_unslashed(components, parent, name)
            self._client.symlink(parent, name, text)

        self._run("symlink", f"{shown} -> {text}", effect, target, path)

    def chdir(self, path: PathArg | int) -> None:
        if isinstance(path, int):
            self._fchdir(path)
            return
        shown, start, components = self._path(path)

        def effect() -> None:
            attrs, physical = self._resolve_physical(start, components)
            if not attrs.is_dir:
                raise simulated_oserror(errno.ENOTDIR)
            self._group.cwd = shown if physical is None else physical
            self._group.cwd_id = attrs.fileid

        self._run("chdir", shown, effect, path)

    def _fchdir(self, fd: int) -> None:
        """fchdir(2): into an open directory, by its handle; no RPC, and a
        directory removed since stays the (stale) working directory.

        The new working directory's path is the one it was opened by.
        """
        open_file = self._file(fd)

        def effect() -> None:
            if not open_file.is_dir:
                raise simulated_oserror(errno.ENOTDIR)
            self._group.cwd = open_file.path
            self._group.cwd_id = open_file.fileid

        self._run("chdir", open_file.path, effect)

    def _new_name_unslashed(self, components: list[str], parent: int, name: str) -> None:
        """filename_create: a new file's name written with a trailing slash is
        ENOENT (EEXIST if the name is taken); only mkdir may have one."""
        if self._slashed(components):
            try:
                self._client.lookup(parent, name)
            except FileNotFoundError:
                raise simulated_oserror(errno.ENOENT) from None
            raise simulated_oserror(errno.EEXIST)

    def _writable_mount(self) -> None:
        if self._client.options.readonly:
            raise simulated_oserror(errno.EROFS)
