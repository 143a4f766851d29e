"""Lock modes, on the simulation and on a real Linux NFSv3 client.

nfs(5): under ``nolock`` and ``local_lock=flock|posix|all`` the named locks
are local: they exclude other programs on the same host only.  The table
is docs/nfs-facts.md, "Lock modes", measured in the VM with
compose/probe_lock_modes.py; simfs models it in simfs/_nfs/_locks.py
(``LockRecord.local``).  Here each mode's two hosts run the probe's
programs: one process holds an exclusive lock per file, another on the
other host and a third on the holder's host each try one without blocking.
"""

from __future__ import annotations

import pytest

from . import programs

# (the holder's call, the tester's call, the tester on the holder's host?)
CASES = (("flock", "flock", False), ("lockf", "lockf", False), ("flock", "lockf", False),
         ("flock", "flock", True), ("lockf", "lockf", True), ("flock", "lockf", True))

# Measured (docs/nfs-facts.md, "Lock modes"), in the order of CASES: a local
# lock excludes only another owner on its own host taking the same kind
# (flock and POSIX locks are separate lists, flc_flock and flc_posix); through
# NLM the server sees both kinds as POSIX locks and they conflict.
R, G = "refused", "granted"
MEASURED = {
    "none": [R, R, R, R, R, R],
    "nolock": [G, G, G, R, R, G],
    "lflock": [G, R, G, R, R, G],
    "lposix": [R, G, G, R, R, G],
    "lall": [G, G, G, R, R, G],
}


@pytest.mark.parametrize("mode", list(MEASURED))
def test_a_lock_held_on_one_host_excludes_other_hosts_and_its_own_as_the_lock_mode_says(
        lock_cluster, mode):
    # "none" is the default mode (local_lock=none): hosts a and b.
    holder, other = ("a", "b") if mode == "none" else (f"{mode}1", f"{mode}2")
    (base,) = lock_cluster.run((holder, programs.fresh, (f"lockmode-{mode}",)))
    files = [f"case{i}" for i in range(len(CASES))]
    held = [(name, call) for name, (call, _, _) in zip(files, CASES, strict=True)]
    far = [(name, tried) for name, (_, tried, same) in zip(files, CASES, strict=True)
           if not same]
    near = [(name, tried) for name, (_, tried, same) in zip(files, CASES, strict=True) if same]
    # The holder locks at once and holds for 3 s; both testers try at 1 s.
    _, far_answers, near_answers = lock_cluster.run(
        (holder, programs.hold_locks, (base, held, 3.0)),
        (other, programs.try_locks, (base, far, 1.0)),
        (holder, programs.try_locks, (base, near, 1.0)))
    assert far_answers + near_answers == MEASURED[mode]
