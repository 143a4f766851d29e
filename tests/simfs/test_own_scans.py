"""simfs's own scans of loaded modules run none of the program's code.

Two scans read every loaded module: the alias scan (``simfs._patch``'s
``_rebind_aliases``: names bound to an original before the routes went in)
and the per-process module scans (``simfs._engine._modules``: which packages
are per-process, which shared ones a process's copy refers to).  A library's
attribute may run code when it is read: torch's ``torch.distributed.reduce_op``
is an object whose ``__getattribute__`` warns ``FutureWarning``, and
``isinstance`` reads ``__class__`` through it; a module's ``__getattr__``
may import a submodule or warn.  With warnings as errors (``-W error``, a
common pytest setting) the first ``World.spawn`` with torch imported failed
with torch's warning raised from the alias scan (issue 30).  The scans read
types and ``__dict__`` directly, so no such code runs, and any warning the
scan itself could raise is silenced for the scan only.

Each case runs in a fresh interpreter: the scans visit a module once per
interpreter, so the test process's own scans are long done.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from .helpers import run_apart

# A library as torch and lazy-loading packages build theirs: every access
# that runs its code records it in ``touched`` and warns.
_LIBRARY = '''
import warnings
touched = []

def _noticed(what):
    touched.append(what)
    warnings.warn(f"lazylib: {what} was read", FutureWarning, stacklevel=2)

class _Deprecated:
    """torch.distributed's reduce_op: every attribute read warns."""
    def __getattribute__(self, key):
        _noticed(f"reduce_op.{key}")
        return object.__getattribute__(self, key)

class _Proxy:
    """A lazy proxy that answers for another class (as mock objects do)."""
    @property
    def __class__(self):
        _noticed("proxy.__class__")
        return int
    def __getattr__(self, key):
        _noticed(f"proxy.{key}")
        raise AttributeError(key)

class _Meta(type):
    def __getattribute__(cls, key):
        if not key.startswith("__") or key in ("__module__", "__dict__", "__func__"):
            _noticed(f"Loud.{key}")
        return type.__getattribute__(cls, key)

class Loud(metaclass=_Meta):
    helper = _Deprecated()
    proxy = _Proxy()

reduce_op = _Deprecated()
proxy = _Proxy()

def function(flag=_Deprecated()):
    return flag

def __getattr__(name):
    # PEP 562: a lazy submodule or a deprecated name (what the program did
    # not ask for must not be imported by simfs).
    _noticed(f"lazylib.{name}")
    import json.tool  # noqa: F401
    raise AttributeError(name)
'''

_PROGRAM = '''
import sys, warnings
sys.path.insert(0, {library_dir!r})
import lazylib
# A sys.modules entry that is not a module, as some packages leave there.
sys.modules["not_a_module"] = lazylib._Deprecated()
sys.modules["proxy_module"] = lazylib._Proxy()
warnings.simplefilter("error")
from simfs import World

def pod():
    import time
    import lazylib  # this process's own copy, scanned at the next hand-over
    time.sleep(1)
    return list(lazylib.touched)

w = World(seed=1)
a, b = w.host("a"), w.host("b")
first = w.spawn(a, pod)
second = w.spawn(b, pod)
w.run()
w.spawn(a, pod)
w.run()
print("pods touched:", first.result(), second.result())
print("touched:", lazylib.touched)
print("json.tool imported:", "json.tool" in sys.modules)
'''


def test_the_scans_run_no_library_code_under_warnings_as_errors(tmp_path: Path):
    (tmp_path / "lazylib.py").write_text(textwrap.dedent(_LIBRARY))
    done = run_apart(_PROGRAM.format(library_dir=str(tmp_path)), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    # Each pod's own copy of lazylib is scanned when the pod hands over (its
    # sleep): its list says what the scan touched there.
    assert done.stdout.splitlines() == [
        "pods touched: [] []", "touched: []", "json.tool imported: False"]
