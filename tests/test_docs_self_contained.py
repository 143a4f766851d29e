"""The repository explains itself: it cites only documents a clone has, and
docs/design.md's module map names every module of simfs.

A citation of a design or style document that lives outside the repository
(the project's private notes, a sibling folder) is a dead end for a user
who cloned it: the fact it points at must be in ``docs/`` (design.md,
nfs-facts.md, contributing.md) and the citation must name that page.
"""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design.md"

# Written so that this file does not match itself: a design document cited
# by section (possibly across a line break and a comment marker) or by file
# name, the style guide by file name or by its name and a colon, and the sibling
# folder.
OUTSIDE = re.compile(
    r"\bDESIGN\b[\s#\"]*(?:§|s\d|\.md\b)"
    r"|\bSTYLE(?:\.md\b|:)"
    r"|(?:\.\.|/work)/shared\b"
)


def _tracked_files() -> list[str]:
    listing = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    return [name for name in listing.decode().split("\0") if name]


def _text(path: Path) -> str | None:
    """The file's text, or None for a binary file (NUL bytes, not UTF-8) or a missing one."""
    try:
        data = path.read_bytes()
    except (FileNotFoundError, IsADirectoryError):
        return None
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def citations_outside_the_repository() -> list[str]:
    found = []
    for name in _tracked_files():
        text = _text(ROOT / name)
        if text is None:
            continue
        for match in OUTSIDE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(f"{name}:{line}: {match.group(0)!r}")
    return found


def test_no_tracked_file_cites_a_document_outside_the_repository():
    found = citations_outside_the_repository()
    assert not found, (
        "cite docs/design.md, docs/nfs-facts.md or docs/contributing.md instead of:\n"
        + "\n".join(found)
    )


def test_the_citation_pattern_catches_each_form_it_is_meant_to():
    design, style, sibling = "DESIGN", "STYLE", "shared"
    for cited in [
        f"({design} §3.5)",
        f"({design}\n    # §3.4)",
        f"{design}.md section 7",
        f"{design} s3.5",
        f"{style}.md: layers",
        f"({style}: observable identifiers)",
        f"../{sibling}/notes",
        f"/work/{sibling}/notes",
    ]:
        assert OUTSIDE.search(cited), cited
    for fine in ["docs/design.md, 'The NFS model'", "/shared/broadcast", "DESIGNS"]:
        assert not OUTSIDE.search(fine), fine


def module_map() -> set[str]:
    """The paths the fenced tree under "## Layout" in docs/design.md names.

    An entry is a line whose first word ends in ``.py`` or ``/``; its depth
    (two spaces a level) puts it inside the last directory entry above it.
    Lines indented past every entry continue a description and are skipped.
    """
    text = DESIGN.read_text(encoding="utf-8")
    start = text.index("## Layout")
    opening = text.index("```\n", start) + 4
    block = text[opening : text.index("\n```", opening)]
    named: set[str] = set()
    stack: list[tuple[int, str]] = []
    for line in block.splitlines():
        entry = re.match(r"^( {0,12})(\S+(?:\.py|/))(?:\s|$)", line)
        if entry is None:
            continue
        indent, name = len(entry.group(1)), entry.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = "".join(parent for _, parent in stack) + name
        named.add(path.rstrip("/"))
        if name.endswith("/"):
            stack.append((indent, name))
    return named


def _simfs_modules() -> list[str]:
    return [
        name
        for name in _tracked_files()
        if name.startswith("simfs/") and name.endswith(".py") and (ROOT / name).exists()
    ]


def test_the_module_map_names_every_module_and_package_of_simfs():
    named = module_map()
    missing = []
    for name in _simfs_modules():
        path = Path(name)
        wanted = str(path.parent) if path.name == "__init__.py" else name
        if wanted not in named:
            missing.append(wanted)
    assert not missing, "docs/design.md's module map ('Layout') lacks:\n" + "\n".join(
        sorted(set(missing))
    )


def test_the_module_map_names_no_module_that_does_not_exist():
    stale = [
        path
        for path in module_map()
        if path.startswith("simfs") and not (ROOT / path).exists()
    ]
    assert not stale, "docs/design.md's module map names missing files:\n" + "\n".join(
        sorted(stale)
    )
