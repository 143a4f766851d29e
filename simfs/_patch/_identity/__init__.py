"""Routes for what a program learns about its process and machine: ids, users, hostname,
environment, session and signals, resource limits; seeded randomness, temporary names and
umask (``_misc``, which also reads tracebacks' source with routing off)."""
