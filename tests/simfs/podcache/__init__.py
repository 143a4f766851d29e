"""A model cache as real inference pods keep one: module-level lock, memo and counters.

A program under test for ``test_process_modules``: each pod (a simulated
process) must see only its own module state, as separate interpreters do.
"""
