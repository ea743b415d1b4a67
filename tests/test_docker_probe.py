"""The Postgres fixture's choice: a testcontainers Postgres where a Docker daemon answers,
the machine's service otherwise. The probe asks the daemon itself (a short timeout, not
docker-py's minute) and says why it found none."""

from __future__ import annotations

import socket
import threading

from conftest import docker_unreachable


def _serve_once(server: socket.socket, answer: bytes) -> threading.Thread:
    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(1024)
            conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_a_daemon_answering_its_ping_is_used(tmp_path, monkeypatch):
    path = tmp_path / "docker.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen(1)
        _serve_once(server, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nOK")
        monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
        assert docker_unreachable() is None


def test_no_daemon_is_found_at_once_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'absent.sock'}")
    assert "no Docker daemon at unix://" in (docker_unreachable() or "")
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{port}")
    assert "no Docker daemon at tcp://127.0.0.1" in (docker_unreachable() or "")
    monkeypatch.setenv("DOCKER_HOST", "ssh://builder")
    assert "is not probed" in (docker_unreachable() or "")


def test_something_else_on_the_socket_is_no_daemon(monkeypatch):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        _serve_once(server, b"SSH-2.0-OpenSSH\r\n")
        monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{server.getsockname()[1]}")
        assert "did not answer like a Docker daemon" in (docker_unreachable() or "")
