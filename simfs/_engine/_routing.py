"""Which simulated process, if any, the calling OS thread is running.

The one piece of state every route reads (``current_process()``), kept in
a module of its own so that the scheduler and the per-process module table
(``_modules``) can both reach it without importing each other.
"""

from __future__ import annotations

import _thread

routing = _thread._local()
