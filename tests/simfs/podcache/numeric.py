"""A program module that uses numpy, a package no process can have a copy of."""

from __future__ import annotations

import numpy


def total(count: int) -> int:
    """The sum of 0..count-1, computed by numpy."""
    return int(numpy.arange(count).sum())
