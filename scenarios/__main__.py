"""``python -m scenarios``: list, run, and compare the seed scenarios."""

import sys

from ._cli import main

sys.exit(main())
