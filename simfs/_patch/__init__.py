"""Routing of plain os/io/shutil/time/threading calls into the world (issue 3)."""


def install() -> None:
    """Install the process-wide routes (idempotent)."""
