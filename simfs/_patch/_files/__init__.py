"""Routes for files: ``os`` path and descriptor calls, ``open``, ``fcntl`` locks, ``mmap``,
the ``os.path`` probes, and the refusal of descriptor numbers no process holds.

What the host answers for its own paths (``/``, ``/proc``, ``/dev``) is the OS
layer's (``simfs/_os/_proc.py``, ``_devices.py``); these modules only decide
which calls go there."""
