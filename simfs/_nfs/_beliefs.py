"""What a host believes about a path, against the server's truth (DESIGN §3.7).

"Why did host B not see the marker?" is a question about B's caches: the
negative dentry that answered, the directory attributes that kept it
trusted, the mount option that set how long.  ``Host.belief(path)`` reads
those caches without sending an RPC, and ``World.explain(path)`` prints
every host's belief beside what the server holds.
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


def _timeout_option(client: NfsClient, timeo_ns: int, is_dir: bool) -> str:
    options = client.options
    low, high = (options.acdirmin, options.acdirmax) if is_dir else (options.acregmin,
                                                                     options.acregmax)
    seconds = timeo_ns / NS_PER_S
    prefix = "acdir" if is_dir else "acreg"
    if options.noac:
        return "noac"
    if seconds <= low:
        return f"{prefix}min={low}"
    if seconds >= high:
        return f"{prefix}max={high}"
    return f"{seconds:g} s, doubled from {prefix}min={low} while unchanged"


def belief(client: NfsClient, host: str, export: str, path: str, now_ns: int) -> Belief:
    """Walk ``path`` through the host's caches only; see ``Belief``."""
    components = [] if path == export else path[len(export) + 1:].split("/")
    directory, walked = client.root, export
    trusted_until: float | None = None
    for name in components:
        cached = client.attrs.get(directory)
        entries = client.dentries.get(directory, {})
        dentry = entries.get(name)
        if cached is None or dentry is None:
            return Belief(host, path, "unknown", f"nothing cached for {name!r} in {walked}; "
                          "the next lookup asks the server", None)
        fileid, verifier = dentry
        expires = cached.read_ns + cached.timeo_ns
        option = _timeout_option(client, cached.timeo_ns, True)
        if verifier != cached.verifier or now_ns >= expires:
            return Belief(host, path, "unknown", f"the entry for {name!r} in {walked} is "
                          "stale; the next lookup revalidates it", None)
        if fileid is None:
            if client.options.lookupcache != "all":
                return Belief(host, path, "unknown", f"lookupcache={client.options.lookupcache}"
                              " never trusts a negative entry", None)
            return Belief(host, path, "absent", f"negative dentry for {name!r} in {walked}, "
                          f"trusted while {walked}'s cached attributes are valid ({option})",
                          expires / NS_PER_S)
        directory = fileid
        walked = f"{walked}/{name}"
        until = expires / NS_PER_S
        trusted_until = until if trusted_until is None else min(trusted_until, until)
    return Belief(host, path, "present", f"positive dentries down to {path}, trusted while "
                  "their directories' cached attributes are valid", trusted_until)
