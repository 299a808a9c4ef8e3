"""A real OCI registry for the tests: Debian's ``docker-registry`` (the CNCF distribution
registry, 2.8), started on 127.0.0.1 with its storage in a temporary folder and htpasswd
(bcrypt) auth, killed at teardown. ``.ci/run`` installs it with apt; where the binary is
absent the tests that need it skip, saying so.

``docker_registry(tmp)`` is a context manager: it yields a ``Served`` with the host
(``127.0.0.1:PORT``), the user and the password.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

BINARY = shutil.which("docker-registry") or "/usr/bin/docker-registry"
USER, PASSWORD = "jaxport-test", "s3cret-Pa55-for-tests"
#: Seconds the registry may take to answer its first request.
START_WAIT = 30.0


@dataclass(frozen=True)
class Served:
    host: str
    user: str
    password: str
    storage: Path


def available() -> bool:
    return os.access(BINARY, os.X_OK)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(tmp: Path, port: int, auth: bool) -> Path:
    import bcrypt

    storage = tmp / "storage"
    storage.mkdir(parents=True, exist_ok=True)
    lines = [
        "version: 0.1",
        "log:",
        "  level: error",
        "  accesslog:",
        "    disabled: true",
        "storage:",
        "  filesystem:",
        f"    rootdirectory: {storage}",
        "  delete:",
        "    enabled: true",
        "http:",
        f"  addr: 127.0.0.1:{port}",
        f"  secret: {os.urandom(16).hex()}",
    ]
    if auth:
        hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=5)).decode()
        (tmp / "htpasswd").write_text(f"{USER}:{hashed}\n")
        lines += [
            "auth:",
            "  htpasswd:",
            "    realm: jaxport-test",
            f"    path: {tmp / 'htpasswd'}",
        ]
    path = tmp / "config.yml"
    path.write_text("\n".join(lines) + "\n")
    return path


@contextlib.contextmanager
def docker_registry(tmp: Path, *, auth: bool = True) -> Iterator[Served]:
    """The registry, up and answering ``GET /v2/``, until the block ends."""
    port = _free_port()
    config = _config(tmp, port, auth)
    log = (tmp / "registry.log").open("wb")
    process = subprocess.Popen(
        [BINARY, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        _wait(port, process, tmp / "registry.log")
        yield Served(f"127.0.0.1:{port}", USER, PASSWORD, tmp / "storage")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        log.close()


def _wait(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_WAIT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"docker-registry exited {process.returncode}: {log.read_text()[-2000:]}"
            )
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v2/", timeout=1.0).status_code in (200, 401):
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError(
        f"docker-registry did not answer in {START_WAIT} s: {log.read_text()[-2000:]}"
    )
