"""The CLI as a registry server's client, against real ``jaxport serve`` processes
(``tests/_server.py``): ``serve`` prints its URL only once it accepts connections, and the
commands a team runs against a server (``ls``, ``show``, ``search``, ``log``, ``alias``,
``token``, ``pull``, ``push FILE``) import neither jax nor SQLAlchemy (issue 25 §4; their
latency is measured by ``benchmarks/bench_thin_client.py``)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import jax
import jax.numpy as jnp
import pytest
from _server import JAXPORT, admin_token, serving

import jaxport

pytestmark = pytest.mark.slow

#: The line ``jaxport serve`` prints on stderr once it accepts connections.
URL_LINE = re.compile(r"jaxport registry server on (http://\S+) \((\d+) process")
HEAVY = ("jax", "jaxlib", "sqlalchemy", "alembic")


@pytest.mark.parametrize("workers", [1, 2])
def test_serve_prints_its_url_once_it_accepts_connections(tmp_path, workers):
    """A client that reads the URL line and connects at once is answered on its first try
    (no retry loop): the line comes after the listening socket, never before it. With
    ``--port 0`` the line names the port the system chose."""
    db, blobs = f"sqlite:///{tmp_path / 'r.db'}", str(tmp_path / "blobs")
    jaxport.Registry(db, blobs=blobs, upgrade=True).close()
    env = {**os.environ, "JAXPORT_REGISTRY": db, "JAXPORT_BLOBS": blobs}
    argv = [JAXPORT, "serve", "--port", "0", "--workers", str(workers), "--open-read"]
    process = subprocess.Popen(
        argv, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    watchdog = threading.Timer(600, os.killpg, (process.pid, signal.SIGKILL))
    watchdog.start()  # a server that never prints its line must not hang the test
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        found = URL_LINE.search(line)
        assert found is not None, line
        url = found.group(1)
        assert not url.endswith(":0") and found.group(2) == str(workers)
        with httpx.Client(transport=httpx.HTTPTransport(retries=0), timeout=60) as client:
            answer = client.get(f"{url}/api/v1/openapi.json")  # the first and only try
        assert answer.status_code == 200
    finally:
        watchdog.cancel()
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        if process.stderr is not None:
            process.stderr.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("thin")
    db, blobs = f"sqlite:///{tmp / 'r.db'}", str(tmp / "blobs")
    with serving(db, blobs, tmp / "serve.log") as s:
        yield s, admin_token(db, blobs)


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    path = tmp_path_factory.mktemp("archive") / "sin.jaxport"
    jaxport.save(jax.export.export(jax.jit(jnp.sin))(jnp.zeros(3)), path)
    return path


#: ``jaxport --registry URL ARGS`` in one process, then the heavy modules it imported.
_PROBE = """
import json, sys
from jaxport._cli.main import main
try:
    main(sys.argv[1:])
except SystemExit as e:
    code = e.code
else:
    code = 0
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(HEAVY))
print(json.dumps({"code": code, "heavy": heavy}), file=sys.stderr)
""".replace("HEAVY", repr(HEAVY))


def _client(server, tmp_path: Path, *args: str) -> dict[str, object]:
    s, token = server
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAXPORT_")}
    env.update(JAXPORT_TOKEN=token, JAXPORT_HOME=str(tmp_path / "home"), COLUMNS="80")
    proc = subprocess.run(
        [sys.executable, "-P", "-c", _PROBE, "--registry", s.url, *args],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert "Traceback" not in proc.stderr, proc.stderr
    return {**json.loads(proc.stderr.strip().splitlines()[-1]), "out": proc.stdout}


def test_the_server_commands_import_neither_jax_nor_sqlalchemy(server, archive, tmp_path):
    commands = [
        ["push", str(archive), "--name", "thin", "--alias", "prod"],
        ["ls"],
        ["ls", "thin"],
        ["show", "thin"],
        ["search", "--name", "thin"],
        ["log"],
        ["alias", "thin"],
        ["alias", "thin", "staging", "1"],
        ["token", "list"],
        ["token", "create", "reader", "--scope", "read"],
        ["pull", "thin", "-o", str(tmp_path / "pulled.jaxport")],
    ]
    found = {" ".join(c): _client(server, tmp_path, *c) for c in commands}
    assert {c: (r["code"], r["heavy"]) for c, r in found.items()} == {c: (0, []) for c in found}
    assert (tmp_path / "pulled.jaxport").read_bytes() == archive.read_bytes()
