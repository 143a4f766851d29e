"""``--backend compose``: engine connection, settings, sessions over agents, teardown."""

from __future__ import annotations

import os
import signal
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from scenarios._base import ProcessSpec, ScenarioError
from scenarios._cli import main
from scenarios._compose import ComposeBackend, config_from_environment, connect, open_for_cli
from scenarios._compose_stack import ComposeStack, StackConfig

from .fake_docker import FakeEngine, FakeNotFound, serve_directories


def fake_sdk(monkeypatch: pytest.MonkeyPatch, from_env: Any) -> None:
    """Install a stand-in ``docker`` package (the SDK is the optional compose extra)."""
    errors = types.ModuleType("docker.errors")
    errors.NotFound = FakeNotFound  # type: ignore[attr-defined]
    module = types.ModuleType("docker")
    module.errors = errors  # type: ignore[attr-defined]
    module.from_env = from_env  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "docker", module)
    monkeypatch.setitem(sys.modules, "docker.errors", errors)


def no_engine() -> Any:
    # What docker.from_env() raises when the socket is missing (docker 7.1).
    raise RuntimeError("Error while fetching server API version: ('Connection aborted.', "
                       "FileNotFoundError(2, 'No such file or directory'))")


def test_without_the_sdk_the_error_says_which_extra_to_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "docker", None)
    with pytest.raises(ScenarioError, match=r"pip install '\.\[compose\]'"):
        connect({})


def test_with_no_engine_the_error_names_the_default_socket_and_how_to_point_elsewhere(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake_sdk(monkeypatch, no_engine)
    with pytest.raises(ScenarioError) as raised:
        connect({})
    message = str(raised.value)
    assert "unix:///var/run/docker.sock (DOCKER_HOST is unset)" in message
    assert "No such file or directory" in message
    assert "DOCKER_HOST=" in message


def test_with_no_engine_the_error_names_the_docker_host_it_tried(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake_sdk(monkeypatch, no_engine)
    with pytest.raises(ScenarioError, match="no Docker engine answers at ssh://gpu-1:"):
        connect({"DOCKER_HOST": "ssh://gpu-1"})


def test_an_engine_that_does_not_answer_a_ping_counts_as_no_engine(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def unanswered() -> Any:
        def ping() -> bool:
            raise ConnectionRefusedError(111, "Connection refused")
        return types.SimpleNamespace(ping=ping)

    fake_sdk(monkeypatch, unanswered)
    with pytest.raises(ScenarioError, match=r"no Docker engine answers.*Connection refused"):
        connect({"DOCKER_HOST": "tcp://10.0.0.5:2376"})


@pytest.mark.parametrize("command", [["run", "handshake"], ["fidelity", "handshake"]])
def test_run_and_fidelity_with_backend_compose_fail_at_once_without_an_engine(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        command: list[str]) -> None:
    fake_sdk(monkeypatch, no_engine)
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    assert main([*command, "--backend", "compose", "--quiet"]) == 2
    error = capsys.readouterr().err
    assert "no Docker engine answers at unix:///var/run/docker.sock" in error
    assert "fidelity:" not in error  # nothing ran before the engine was asked


@pytest.mark.parametrize(("name", "value"), [("AGENT_PORT", "seven"), ("AGENT_PORT", "0"),
                                             ("AGENT_PORT", "65500"),
                                             ("COMPOSE_READY_TIMEOUT", "-1")])
def test_a_bad_setting_is_refused_naming_it_and_what_is_allowed(name: str, value: str) -> None:
    with pytest.raises(ScenarioError, match=f"{name}={value!r}: allowed"):
        config_from_environment({name: value})


def test_settings_come_from_the_environment() -> None:
    config = config_from_environment({
        "NFS_SERVER": "10.0.0.5", "NFS_EXPORT": "/srv/nfs", "AGENT_PORT": "7800",
        "NFS_CLIENT_IMAGE": "simfs/nfs-client:local", "COMPOSE_PROJECT_NAME": "ci",
        "COMPOSE_READY_TIMEOUT": "60", "COMPOSE_LOG_DIR": "/tmp/logs"})
    assert (config.nfs_server, config.nfs_export, config.agent_port, config.client_image,
            config.project, config.ready_timeout, config.log_dir) == (
        "10.0.0.5", "/srv/nfs", 7800, "simfs/nfs-client:local", "ci", 60.0, "/tmp/logs")
    assert config_from_environment({}).nfs_server is None  # start the server container


def backend_on(engine: FakeEngine, tmp_path: Path, port: int) -> ComposeBackend:
    engine.serve_agents = serve_directories(tmp_path)
    stack = ComposeStack(engine.client(), StackConfig(agent_port=port), not_found=(FakeNotFound,),
                         clock=engine.clock, sleep=engine.clock.sleep)
    return ComposeBackend(stack)


def free_ports(count: int) -> int:
    """The first of ``count`` consecutive free TCP ports on 127.0.0.1."""
    import socket

    for first in range(30000 + os.getpid() % 5000, 60000, count):
        sockets = []
        try:
            for port in range(first, first + count):
                handle = socket.socket()
                sockets.append(handle)
                handle.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
        finally:
            for handle in sockets:
                handle.close()
    raise RuntimeError("no free ports")


def write_marker(root: str, name: str) -> str:
    Path(root, name).write_text("from the trainer")
    return "written"


def read_marker(root: str, name: str) -> str:
    return Path(root, name).read_text()


def test_a_session_runs_each_hosts_processes_through_its_containers_agent(
        tmp_path: Path) -> None:
    engine = FakeEngine()
    with backend_on(engine, tmp_path, free_ports(2)) as backend:
        session = backend.session({"trainer": "vers=3", "consumer": "vers=3"}, seed=0)
        assert session.run([ProcessSpec("trainer", write_marker, ("m",))], timeout=60) == [
            "written"]
        assert session.run([ProcessSpec("consumer", read_marker, ("m",))], timeout=60) == [
            "from the trainer"]
        session.close()
    assert engine.left() == []


def test_sessions_with_the_same_hosts_share_one_stack_and_new_options_restart_it(
        tmp_path: Path) -> None:
    engine = FakeEngine()
    with backend_on(engine, tmp_path, free_ports(2)) as backend:
        backend.session({"trainer": "vers=3", "consumer": "vers=3"}, seed=0).close()
        backend.session({"trainer": "vers=3", "consumer": "vers=3"}, seed=1).close()
        assert [c[1] for c in engine.calls if c[0] == "run"].count("simfs-host-trainer") == 1
        backend.session({"trainer": "vers=3,acdirmin=3", "consumer": "vers=3"}, seed=2)
        trainers = [c for c in engine.containers if c.name == "simfs-host-trainer"]
        assert [c.kwargs["environment"]["NFS_OPTIONS"] for c in trainers] == [
            "vers=3,nosharecache", "vers=3,acdirmin=3,nosharecache"]
        assert trainers[0].removed and not trainers[1].removed


def test_ctrl_c_in_the_middle_of_a_run_still_tears_the_stack_down(tmp_path: Path) -> None:
    engine = FakeEngine()
    with pytest.raises(KeyboardInterrupt), backend_on(engine, tmp_path, free_ports(2)) as backend:
        backend.session({"trainer": "vers=3", "consumer": "vers=3"}, seed=0)
        assert len(engine.left()) == 4
        raise KeyboardInterrupt
    assert engine.left() == []


def test_the_cli_backend_is_torn_down_at_exit_and_on_sigterm(
        monkeypatch: pytest.MonkeyPatch) -> None:
    engine = FakeEngine()
    fake_sdk(monkeypatch, engine.client)
    registered: list[Any] = []
    handlers: dict[int, Any] = {}
    monkeypatch.setattr("atexit.register", registered.append)
    monkeypatch.setattr("signal.getsignal", lambda signum: signal.SIG_DFL)
    monkeypatch.setattr("signal.signal", handlers.__setitem__)
    backend = open_for_cli()
    assert registered == [backend.close]
    with pytest.raises(KeyboardInterrupt):
        handlers[signal.SIGTERM](signal.SIGTERM, None)
