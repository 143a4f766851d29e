"""Guards: what a simulated process may not do fails loudly, never reaching the real machine
silently (subprocesses and sockets, real file access through the audit hook, native writes
through the seccomp guard (on by default), files left in the real working directory)."""
