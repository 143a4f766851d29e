"""The test body's window on the server's truth, bypassing every client cache.

Code outside the simulated processes (the test itself) is not patched; it
sets up the export and checks outcomes through this view.  Nothing here is a
syscall: it sends no RPC, records no trace, and never yields.
"""

from __future__ import annotations

import errno
import posixpath

from .._errors import SimfsError, simulated_oserror
from ._server import DIR, LINK, Attrs, Inode, Server


class ServerView:
    """Read and prepare the export by path, e.g. ``world.server.exists("/shared/t")``.

    Paths name server objects as they are: a symbolic link is never
    followed here (following is the client's path walk); ``readlink`` and
    ``islink`` show the link itself.
    """

    def __init__(self, server: Server, export: str) -> None:
        self._server = server
        self._export = export

    def _components(self, path: str) -> list[str]:
        text = posixpath.normpath(path)
        if text == self._export:
            return []
        if not text.startswith(self._export + "/"):
            raise SimfsError(f"path {path!r} is outside the export {self._export!r}")
        return text[len(self._export) + 1:].split("/")

    def _inode(self, path: str) -> Inode:
        node = self._server.root
        for name in self._components(path):
            child = node.entries.get(name) if node.kind == DIR else None
            if child is None:
                raise simulated_oserror(errno.ENOENT, path)
            node = child
        return node

    def _parent(self, path: str) -> tuple[Inode, str]:
        components = self._components(path)
        if not components:
            raise simulated_oserror(errno.EEXIST, path)
        parent = self._inode(posixpath.dirname(posixpath.normpath(path)))
        return parent, components[-1]

    def exists(self, path: str) -> bool:
        try:
            self._inode(path)
        except FileNotFoundError:
            return False
        return True

    def isdir(self, path: str) -> bool:
        return self.exists(path) and self._inode(path).kind == DIR

    def islink(self, path: str) -> bool:
        return self.exists(path) and self._inode(path).kind == LINK

    def readlink(self, path: str) -> str:
        """A link's target text, as SYMLINK stored it."""
        return self._server.readlink(self._inode(path).fileid)

    def symlink(self, target: str, path: str) -> None:
        """Make a link at ``path`` holding ``target`` (argument order as ``os.symlink``)."""
        parent, name = self._parent(path)
        self._server.symlink(parent.fileid, name, target)

    def stat(self, path: str) -> Attrs:
        return self._inode(path).attrs()

    def listdir(self, path: str) -> list[str]:
        """Names in the server's order, ``.nfs`` leftovers included."""
        return [name for name, _ in self._server.readdir(self._inode(path).fileid,
                                                          accessed=False)]

    def read_bytes(self, path: str) -> bytes:
        return self._server.read(self._inode(path).fileid)

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return self.read_bytes(path).decode(encoding)

    def mkdir(self, path: str, *, parents: bool = False, exist_ok: bool = False) -> None:
        if parents:
            parent_path = posixpath.dirname(posixpath.normpath(path))
            if parent_path != path and not self.exists(parent_path):
                self.mkdir(parent_path, parents=True, exist_ok=True)
        if exist_ok and self.isdir(path):
            return
        parent, name = self._parent(path)
        self._server.mkdir(parent.fileid, name, 0o755)

    def write_bytes(self, path: str, data: bytes) -> None:
        parent, name = self._parent(path)
        attrs, _ = self._server.create(parent.fileid, name, exclusive=False, mode=0o644)
        self._server.write(attrs.fileid, data)

    def write_text(self, path: str, text: str, encoding: str = "utf-8") -> None:
        self.write_bytes(path, text.encode(encoding))
