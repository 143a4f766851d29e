"""Routes for libraries people run inside the world: coordination libraries' per-process
globals, ``logging``'s record times, and the native I/O of safetensors, blake3 and numpy."""
