"""The discrete-event engine: virtual clock, scheduler and processes, simulated
synchronisation, and the trace.  Knows nothing about NFS or files."""
