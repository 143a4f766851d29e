"""What a host believes about a path, against the server's truth
(docs/design.md, "Trace and beliefs").

"Why did host B not see the marker?" is a question about B's caches: the
negative dentry that answered, the directory attributes that kept it
trusted, the mount option that set how long.  ``Host.belief(path)`` asks
the client the question its own lookup code answers (``NfsClient.verdict``,
the one place the trust rules live) at each step of the walk a ``stat``
would make, without sending an RPC; ``World.explain(path)`` prints every
host's belief beside what the server holds.  The belief predicts the next
syscall: "present" and "absent" are what it returns, "unknown" means the
server will decide.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._engine._clock import NS_PER_S

if TYPE_CHECKING:
    from ._client import NfsClient


@dataclass(frozen=True)
class Belief:
    """One host's answer for a path, if it looked now without asking the server.

    ``believes`` is "present", "absent" or "unknown" (the next lookup asks);
    ``until`` is the virtual time the cached answer stops being trusted on its
    own (an open of the directory can end it sooner); ``because`` says which
    cache holds it and which mount option sets its lifetime.
    """

    host: str
    path: str
    believes: str
    because: str
    until: float | None

    def format(self) -> str:
        """One line: host, belief, until when, and the rule behind it."""
        until = "" if self.until is None else f" until {self.until:.3f} s"
        return f"{self.host}: {self.believes}{until} ({self.because})"


def belief(client: NfsClient, host: str, export: str, path: str, now_ns: int) -> Belief:
    """Walk ``path`` as ``stat`` would, asking the client's own ``verdict`` at
    each name instead of sending RPCs; see ``Belief``.

    Where the next step would need the server (a LOOKUP, a GETATTR of expired
    attributes) the belief is "unknown": the answer is the server's, not the
    cache's.
    """
    from ._lookup import NEGATIVE, NO_NEGATIVE, REASONS

    components = [] if path == export else path[len(export) + 1:].split("/")
    directory, walked = client.root, export
    until_ns: int | None = None

    def attrs_valid(fileid: int, name: str) -> str | None:
        """None if the cached attributes of ``fileid`` serve a stat now, else why not."""
        nonlocal until_ns
        if fileid in client.stale:
            return f"the server called {name}'s file handle stale; the next use is ESTALE"
        cached = client.attrs.get(fileid)
        if cached is None:
            return f"no attributes of {name} are cached; the next stat asks (GETATTR)"
        if not cached.valid_at(now_ns):
            option = cached.lifetime_option(client.options)
            return (f"the cached attributes of {name} expired ({option}); the next stat "
                    "asks the server (GETATTR)")
        expires = cached.expires_ns
        until_ns = expires if until_ns is None else min(until_ns, expires)
        return None

    if directory not in client.attrs:
        return Belief(host, path, "unknown", f"nothing is cached for {export}", None)
    link_why = (" is a symbolic link: a belief does not follow links (the answer is its "
                "target's)")
    for name in components:
        cached = client.attrs[directory]
        if cached.attrs.is_link:
            return Belief(host, path, "unknown", walked + link_why, None)
        if not cached.attrs.is_dir:
            return Belief(host, path, "absent", f"{walked} is not a directory (ENOTDIR)",
                          _seconds(until_ns))
        # An ACCESS the walk may send cannot change the answer: simfs grants
        # every access to a live directory, and a stale one is caught above.
        verdict = client.verdict(directory, name)
        where = f"for {name!r} in {walked}"
        if verdict == NEGATIVE:
            option = cached.lifetime_option(client.options)
            expires = cached.expires_ns
            end = expires if until_ns is None else min(until_ns, expires)
            return Belief(host, path, "absent", f"negative dentry {where}, trusted while "
                          f"{walked}'s cached attributes are valid ({option})", _seconds(end))
        if not isinstance(verdict, int):
            reason = REASONS[verdict]
            if verdict == NO_NEGATIVE:
                reason = f"lookupcache={client.options.lookupcache} {reason}"
            return Belief(host, path, "unknown", f"{where}: {reason}", None)
        expires = cached.expires_ns
        until_ns = expires if until_ns is None else min(until_ns, expires)
        walked = f"{walked}/{name}"
        why = attrs_valid(verdict, walked)
        if why is not None:
            return Belief(host, path, "unknown", why, None)
        directory = verdict
    final = client.attrs.get(directory)
    if final is not None and final.attrs.is_link:
        return Belief(host, path, "unknown", walked + link_why, None)
    return Belief(host, path, "present", f"positive dentries down to {path}, trusted while "
                  "their directories' cached attributes are valid, and its own cached "
                  "attributes", _seconds(until_ns))


def _seconds(until_ns: int | None) -> float | None:
    return None if until_ns is None else until_ns / NS_PER_S
