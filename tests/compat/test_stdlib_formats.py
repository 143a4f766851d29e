"""The standard library's file formats, written on one host and read on the other.

Each writer runs unmodified on host a; host b starts reading two virtual
seconds later, after every writer has closed its files, so close-to-open
makes a's bytes b's (docs/nfs-facts.md, "Writes and data visibility").  What b
reads must be what a wrote, and nothing may reach the real disk.  Archives are
what a shared model cache unpacks; shelve and dbm.dumb are what small job
ledgers are made of.
"""

from __future__ import annotations

import bz2
import configparser
import csv
import dbm.dumb
import gzip
import io
import json
import lzma
import mailbox
import os
import plistlib
import shelve
import shutil
import tarfile
import time
import wave
import zipfile
from collections.abc import Callable

import pytest

from .conftest import two_hosts

DIR = "/shared/formats"
PAYLOAD = bytes(range(256)) * 40


def _zip_write() -> None:
    with zipfile.ZipFile(f"{DIR}/a.zip", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("weights.bin", PAYLOAD)
        archive.writestr("meta/config.json", json.dumps({"layers": 4}))


def _zip_read() -> object:
    with zipfile.ZipFile(f"{DIR}/a.zip") as archive:
        return sorted(archive.namelist()), archive.read("weights.bin") == PAYLOAD


def _tar_write() -> None:
    with open(f"{DIR}/w.bin", "wb") as file:
        file.write(PAYLOAD)
    with tarfile.open(f"{DIR}/a.tar.gz", "w:gz") as archive:
        archive.add(f"{DIR}/w.bin", arcname="model/w.bin")


def _tar_read() -> object:
    with tarfile.open(f"{DIR}/a.tar.gz") as archive:
        archive.extractall(f"{DIR}/out", filter="data")
    with open(f"{DIR}/out/model/w.bin", "rb") as file:
        return file.read() == PAYLOAD


def _compressed_write() -> None:
    for opener, suffix in ((gzip.open, "gz"), (bz2.open, "bz2"), (lzma.open, "xz")):
        with opener(f"{DIR}/p.{suffix}", "wb") as file:
            file.write(PAYLOAD)


def _compressed_read() -> object:
    answers = []
    for opener, suffix in ((gzip.open, "gz"), (bz2.open, "bz2"), (lzma.open, "xz")):
        with opener(f"{DIR}/p.{suffix}", "rb") as file:
            answers.append(file.read() == PAYLOAD)
    return answers


# shelve over dbm.dumb, named: shelve.open's default backend is dbm.sqlite3
# on 3.13 and a C dbm where one is built, both refused inside the world.
def _shelve_write() -> None:
    with shelve.Shelf(dbm.dumb.open(f"{DIR}/ledger", "c")) as ledger:
        ledger["shard-3"] = {"state": "promoted", "step": 1200}
    with dbm.dumb.open(f"{DIR}/dumb", "c") as db:
        db[b"key"] = b"value"


def _shelve_read() -> object:
    with shelve.Shelf(dbm.dumb.open(f"{DIR}/ledger", "r")) as ledger:
        record = dict(ledger)
    with dbm.dumb.open(f"{DIR}/dumb", "r") as db:
        return record, db[b"key"]


def _text_write() -> None:
    with open(f"{DIR}/rows.csv", "w", newline="") as file:
        csv.writer(file).writerows([["step", "loss"], [1, 0.5]])
    config = configparser.ConfigParser()
    config["train"] = {"lr": "0.001"}
    with open(f"{DIR}/train.ini", "w") as file:
        config.write(file)
    with open(f"{DIR}/p.plist", "wb") as file:
        plistlib.dump({"epochs": 3}, file)


def _text_read() -> object:
    with open(f"{DIR}/rows.csv", newline="") as file:
        rows = list(csv.reader(file))
    config = configparser.ConfigParser()
    config.read(f"{DIR}/train.ini")
    with open(f"{DIR}/p.plist", "rb") as file:
        return rows, config["train"]["lr"], plistlib.load(file)


def _media_write() -> None:
    with wave.open(f"{DIR}/a.wav", "wb") as audio:
        audio.setnchannels(1)
        audio.setsampwidth(2)
        audio.setframerate(8000)
        audio.writeframes(PAYLOAD[:800])
    box = mailbox.Maildir(f"{DIR}/mail", create=True)
    box.add(b"Subject: done\n\nstep 1200\n")


def _media_read() -> object:
    with wave.open(f"{DIR}/a.wav", "rb") as audio:
        frames = audio.readframes(audio.getnframes())
    (message,) = list(mailbox.Maildir(f"{DIR}/mail", create=False))
    return frames == PAYLOAD[:800], message["Subject"]


def _archive_write() -> None:
    os.makedirs(f"{DIR}/tree/sub")
    with open(f"{DIR}/tree/sub/f", "wb") as file:
        file.write(PAYLOAD)
    shutil.make_archive(f"{DIR}/tree", "zip", root_dir=f"{DIR}/tree")


def _archive_read() -> object:
    shutil.unpack_archive(f"{DIR}/tree.zip", f"{DIR}/untree")
    with open(f"{DIR}/untree/sub/f", "rb") as file:
        return file.read() == PAYLOAD


CASES: dict[str, tuple[Callable[[], None], Callable[[], object], object]] = {
    "zipfile": (_zip_write, _zip_read, (["meta/config.json", "weights.bin"], True)),
    "tarfile": (_tar_write, _tar_read, True),
    "gzip, bz2, lzma": (_compressed_write, _compressed_read, [True, True, True]),
    "shelve, dbm.dumb": (_shelve_write, _shelve_read,
                         ({"shard-3": {"state": "promoted", "step": 1200}}, b"value")),
    "csv, configparser, plistlib": (_text_write, _text_read,
                                    ([["step", "loss"], ["1", "0.5"]], "0.001",
                                     {"epochs": 3})),
    "wave, mailbox": (_media_write, _media_read, (True, "done")),
    "shutil archives": (_archive_write, _archive_read, True),
}


@pytest.mark.parametrize("name", list(CASES))
def test_written_on_one_host_read_on_the_other(name, real_disk_untouched):
    write, read, expected = CASES[name]
    world, a, b = two_hosts()
    world.server.mkdir(DIR)

    def reader() -> object:
        time.sleep(2)
        return read()

    world.spawn(a, write)
    reading = world.spawn(b, reader)
    world.run()
    assert reading.result() == expected
    assert real_disk_untouched()


def test_an_archive_read_back_byte_for_byte_matches_one_built_outside():
    # The same archive built by the same code outside the world: the
    # simulation's read, seek and write paths give zipfile the same bytes.
    outside = io.BytesIO()
    with zipfile.ZipFile(outside, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr(zipfile.ZipInfo("w.bin", (2020, 1, 1, 0, 0, 0)), PAYLOAD)

    def build() -> bytes:
        with zipfile.ZipFile(f"{DIR}/s.zip", "w", zipfile.ZIP_STORED) as archive:
            archive.writestr(zipfile.ZipInfo("w.bin", (2020, 1, 1, 0, 0, 0)), PAYLOAD)
        with open(f"{DIR}/s.zip", "rb") as file:
            return file.read()

    world, a, _ = two_hosts()
    world.server.mkdir(DIR)
    built = world.spawn(a, build)
    world.run()
    assert built.result() == outside.getvalue()
