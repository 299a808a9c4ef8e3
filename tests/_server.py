"""Registry servers for tests: real ``jaxport serve`` processes on 127.0.0.1.

``serving(db_url, blobs)`` starts one (or ``workers`` uvicorn processes behind one port), waits
for its OpenAPI document with a bounded loop, and stops it at the end; ``admin_token`` makes a
token straight in the database.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

JAXPORT = str(Path(sys.executable).with_name("jaxport"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclasses.dataclass
class Server:
    url: str
    db_url: str
    blobs: str
    process: subprocess.Popen[bytes]
    log: Path

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)


def admin_token(db_url: str, blobs: str, name: str = "admin", scope: str = "admin", **kw) -> str:
    import jaxport

    with jaxport.Registry(db_url, blobs=blobs) as reg:
        return reg.tokens.create(name, scope, **kw).secret


def start(
    db_url: str, blobs: str, log: Path, *, workers: int = 1, extra: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> Server:  # fmt: skip
    """A server over ``db_url`` and ``blobs`` (the database is made or upgraded first)."""
    import jaxport

    jaxport.Registry(db_url, blobs=blobs, upgrade=True).close()
    port = free_port()
    environ = {**os.environ, **(env or {}), "JAXPORT_REGISTRY": db_url, "JAXPORT_BLOBS": blobs}
    environ.pop("JAXPORT_TOKEN", None)
    with log.open("wb") as out:
        process = subprocess.Popen(
            [JAXPORT, "serve", "--host", "127.0.0.1", "--port", str(port), "--workers",
             str(workers), *extra],
            stdout=out, stderr=subprocess.STDOUT, env=environ, start_new_session=True,
        )  # fmt: skip
    server = Server(f"http://127.0.0.1:{port}", db_url, blobs, process, log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"jaxport serve exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{server.url}/api/v1/openapi.json", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    server.kill()
    raise RuntimeError(f"jaxport serve did not answer within 60 s: {log.read_text()[-2000:]}")


@contextlib.contextmanager
def serving(db_url: str, blobs: str, log: Path, **kw) -> Iterator[Server]:
    server = start(db_url, blobs, log, **kw)
    try:
        yield server
    finally:
        server.kill()
