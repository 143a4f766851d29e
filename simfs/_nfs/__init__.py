"""The NFSv3 model: server state, the Linux client's caches, mount options,
NLM locks, fault plans, and what a client believes about a path."""
