"""Which simulated process, if any, the calling OS thread is running.

The one piece of state every route reads (``current_process()``), kept in
a module of its own so that the scheduler and the per-process module table
(``_modules``) can both reach it without importing each other.
"""

from __future__ import annotations

import _thread

routing = _thread._local()

# The real OS threads that belong to worlds (the greenlet baton's engine
# threads, the thread baton's process threads), by real ident.  A thread
# whose ``routing.process`` is None is either one of these with routing
# turned off on purpose (``outside_world``) or a thread of the test process
# started outside every world (a pool or loop thread made before it): the
# guard on the simulated mounts' paths (``simfs._patch._guards._outside``)
# tells the two apart by this set.
world_threads: set[int] = set()
real_get_ident = _thread.get_ident
