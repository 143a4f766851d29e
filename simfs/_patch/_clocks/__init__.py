"""Routes for clocks: ``time``, ``datetime``, CPU-time clocks and the local time zone,
all on the world's virtual clock."""
