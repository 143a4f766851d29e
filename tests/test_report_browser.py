"""The browser tier: headless Chromium renders a --report file, and it is not blank.

Run with ``pytest -m browser``.  It needs Debian's ``chromium-headless-shell``
(or ``chromium``); without one it says so and does not pretend to pass.  The
screenshot is decoded here (a PNG reader in a few lines, no imaging library)
and must show the swimlane colours: the belief bars and the red stall bar,
which only appear if the inline SVG was drawn.
"""

import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from scenarios._cli import main
from simfs._report._html import COLOURS, PLOT_W, STALL

pytestmark = pytest.mark.browser

BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")
EXTRA_PLACES = ("/usr/lib/chromium/chromium-headless-shell", "/usr/lib/chromium/chromium")


def _browser():
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    return next((place for place in EXTRA_PLACES if Path(place).exists()), None)


def _png_pixels(data):
    """(width, height, rows of RGB tuples) of an 8-bit RGB or RGBA PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    position, idat, header = 8, b"", None
    while position < len(data):
        (length,) = struct.unpack(">I", data[position:position + 4])
        kind = data[position + 4:position + 8]
        body = data[position + 8:position + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        position += 12 + length
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    channels = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, previous = [], bytearray(stride)
    for row in range(height):
        start = row * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            corner = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                estimate = left + up - corner
                pa, pb, pc = abs(estimate - left), abs(estimate - up), abs(estimate - corner)
                best = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                line[i] = (line[i] + best) & 0xFF
        rows.append([tuple(line[i:i + 3]) for i in range(0, stride, channels)])
        previous = line
    return width, height, rows


def _rgb(colour):
    return tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))


def test_headless_chromium_draws_the_report_with_its_lanes_and_stall(tmp_path, capsys):
    browser = _browser()
    if browser is None:
        pytest.skip("no headless Chromium installed (apt-get install chromium-headless-shell):"
                    " the browser tier did not run")
    report = tmp_path / "report.html"
    assert main(["run", "handshake", "--trials", "1", "--quiet", "--report", str(report)]) == 0
    capsys.readouterr()
    shot = tmp_path / "shot.png"
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                    "--hide-scrollbars", "--window-size=1100,900",
                    f"--screenshot={shot}", report.as_uri()],
                   check=True, capture_output=True, timeout=120)
    width, height, rows = _png_pixels(shot.read_bytes())
    assert (width, height) == (1100, 900)
    seen = {pixel for row in rows for pixel in row}
    assert len(seen) > 20, "the screenshot is blank or nearly so"
    for colour in (COLOURS["absent"], COLOURS["present"], STALL):
        assert _rgb(colour) in seen, colour


def _longest_run(rows, colour):
    """The most pixels of ``colour`` side by side in one row of the screenshot."""
    best = 0
    for row in rows:
        run = 0
        for pixel in row:
            run = run + 1 if pixel == colour else 0
            best = max(best, run)
    return best


def test_a_stall_of_a_long_run_is_drawn_wide_enough_to_read(tmp_path, capsys):
    # 20 trials make a 600 s session; each ~29 s stall was 42 px of an 860 px
    # lane.  Each path is now drawn where its hosts and the server disagree.
    browser = _browser()
    if browser is None:
        pytest.skip("no headless Chromium installed (apt-get install chromium-headless-shell):"
                    " the browser tier did not run")
    report = tmp_path / "report.html"
    assert main(["run", "handshake", "--trials", "20", "--quiet", "--report",
                 str(report)]) == 0
    capsys.readouterr()
    shot = tmp_path / "shot.png"
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                    "--hide-scrollbars", "--window-size=1100,900",
                    f"--screenshot={shot}", report.as_uri()],
                   check=True, capture_output=True, timeout=120)
    _, _, rows = _png_pixels(shot.read_bytes())
    assert _longest_run(rows, _rgb(STALL)) > PLOT_W * 0.7
