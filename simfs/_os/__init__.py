"""The POSIX layer a simulated process calls: path syscalls, file I/O and the
descriptor table, directory iterators.  Speaks to the NFS model below it."""
