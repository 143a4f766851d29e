"""HTTP without a network: requests with responses, httpx with respx, inside the world.

A simulated process has no network: a real socket is refused loudly
(``SimulationEscape`` naming the call).  Programs that download (a model
hub client, a weights fetcher) are tested the way their own suites test
them, with an HTTP mock; before issue 24 ``requests`` was refused before it
sent anything, because it looks for ``~/.netrc``, which was outside the
export.  The home directory is now the host's local disk, and the mocks
patch the transport in Python, so they work unchanged inside the world.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import pytest
import requests
import responses
import respx

from simfs import SimulationEscape

from .conftest import two_hosts

BLOB = bytes(range(256)) * 64  # 16 KiB of "model weights"
URL = "https://hub.example/models/llm/model.safetensors"


def _publish(content: bytes, path: str) -> None:
    """Write, then rename into place: the reader sees all of it or nothing."""
    with open(path + ".part", "wb") as handle:
        handle.write(content)
    os.rename(path + ".part", path)


def _wait_and_read(path: str) -> bytes:
    while not os.path.exists(path):
        time.sleep(1)
    return Path(path).read_bytes()


@responses.activate
def download_with_requests(path: str) -> int:
    responses.get(URL, body=BLOB)
    reply = requests.get(URL, timeout=10)
    reply.raise_for_status()
    _publish(reply.content, path)
    return len(reply.content)


@respx.mock
def download_with_httpx(path: str) -> int:
    respx.get(URL).mock(return_value=httpx.Response(200, content=BLOB))
    reply = httpx.get(URL)
    reply.raise_for_status()
    _publish(reply.content, path)
    return len(reply.content)


@pytest.mark.parametrize("download", [download_with_requests, download_with_httpx])
def test_a_pod_downloads_a_mocked_blob_into_the_export_while_another_host_reads_it(
        download, real_disk_untouched):
    w, a, b = two_hosts()
    w.server.mkdir("/shared/cache")
    path = "/shared/cache/model.safetensors"
    reader = w.spawn(b, _wait_and_read, path)
    downloader = w.spawn(a, download, path)
    w.run(until=120)
    assert downloader.result() == len(BLOB)
    assert reader.result() == BLOB
    assert w.server.read_bytes(path) == BLOB
    assert real_disk_untouched()


def test_requests_reads_the_hosts_own_netrc_for_credentials():
    w, a, b = two_hosts()

    @responses.activate
    def fetch() -> str | None:
        responses.get(URL, body=b"ok")
        Path("~/.netrc").expanduser().write_text(
            "machine hub.example login trainer password s3cret\n")
        requests.get(URL, timeout=10)
        return responses.calls[0].request.headers.get("Authorization")

    @responses.activate
    def fetch_elsewhere() -> str | None:
        responses.get(URL, body=b"ok")
        requests.get(URL, timeout=10)
        return responses.calls[0].request.headers.get("Authorization")

    with_netrc = w.spawn(a, fetch)
    w.run()
    without = w.spawn(b, fetch_elsewhere)  # another host: its home has no .netrc
    w.run()
    assert with_netrc.result() == "Basic dHJhaW5lcjpzM2NyZXQ="  # trainer:s3cret
    assert without.result() is None


@pytest.mark.parametrize("client", ["requests", "httpx"])
def test_an_unmocked_request_is_refused_loudly_before_any_real_socket(client):
    def fetch() -> object:
        if client == "requests":
            return requests.get(URL, timeout=10)
        return httpx.get(URL)

    w, a, _ = two_hosts()
    w.spawn(a, fetch, name="downloader")
    with pytest.raises(SimulationEscape, match=r"socket\.\w+\(.*'hub\.example', 443"):
        w.run()
