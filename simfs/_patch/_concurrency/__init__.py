"""Routes for concurrency: ``threading`` and ``queue``, asyncio's and trio's event loops,
each waiting on the world's scheduler."""
