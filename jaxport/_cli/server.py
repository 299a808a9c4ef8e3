"""``jaxport serve``: the registry server (``server/``) over a database registry."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from pathlib import Path
from typing import Any

import click

from jaxport._errors import InvalidNameError

__all__ = ["serve"]

#: uvicorn's exit status when the server could not start (``uvicorn.main.STARTUP_FAILURE``).
_STARTUP_FAILURE = 3
#: Seconds each worker of ``--workers N`` may take to start before the URL is not printed.
_READY_WITHIN = 600.0


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    default=8000,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port to listen on.",
)
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Server processes (uvicorn workers), over the same database and blobs.",
)
@click.option(
    "--open-read", is_flag=True, help="Reads (API and pages) need no token; writes always do."
)
@click.option(
    "--webhook",
    "webhooks",
    multiple=True,
    metavar="URL",
    help="POST each event here as JSON (repeat); signed when --webhook-secret-file.",
)
@click.option(
    "--webhook-secret-file",
    type=click.Path(exists=True, dir_okay=False),
    help="A file holding the HMAC key of the webhooks' X-Jaxport-Signature.",
)
@click.option(
    "--max-upload",
    type=click.IntRange(min=1),
    metavar="BYTES",
    help="The largest part one upload, and a commit's archives, may send (default 64 GiB).",
)
@click.option(
    "--memory-budget",
    type=click.IntRange(min=1 << 20),
    metavar="BYTES",
    help="Memory that large bodies and commits may hold at once per process (default half the "
    "machine's); past it a request waits, then gets 503 with Retry-After.",
)
@click.option(
    "--max-connections",
    default=1024,
    show_default=True,
    type=click.IntRange(16, 1 << 20),
    help="Open connections per process; past them, 503.",
)
@click.option(
    "--presign-expires",
    type=click.IntRange(0, 7 * 24 * 3600),
    metavar="SECONDS",
    help="How long the presigned URLs of an S3 blob store last (default 900, or "
    "$JAXPORT_PRESIGN_EXPIRES; 0: none, every byte through the server).",
)
@click.option("--upgrade", is_flag=True, help="Upgrade an older database schema first.")
@click.pass_context
def serve(
    ctx: click.Context, host: str, port: int, workers: int, open_read: bool,
    webhooks: tuple[str, ...], webhook_secret_file: str | None, max_upload: int | None,
    memory_budget: int | None, max_connections: int, presign_expires: int | None,
    upgrade: bool,
) -> None:  # fmt: skip
    """Serve the registry over HTTP: the API at /api/v1 (OpenAPI at /api/v1/openapi.json),
    web pages at /. The registry is --registry / --blobs (or their environment variables);
    clients need a token (jaxport token create) and no database password."""
    from jaxport._extras import require
    from jaxport.registry import Registry
    from jaxport.registry._internal import RegistryConfig, is_server_url

    for module in ("fastapi", "uvicorn", "jinja2", "httpx", "fastapi_offline"):
        require(module, "jaxport serve")
    import uvicorn

    from jaxport.server import ENV_OPTIONS, options_to_env

    url, blobs = ctx.obj.url, ctx.obj.blobs
    if is_server_url(url or RegistryConfig.from_env().url):
        raise InvalidNameError(
            "jaxport serve serves a database registry: give it a database URL (--registry or "
            "$JAXPORT_REGISTRY), not a server's"
        )
    Registry(url, blobs=blobs, upgrade=upgrade).close()  # fails here, clearly, if it cannot open
    _set_presign_expires(presign_expires)
    secret = Path(webhook_secret_file).read_text().strip() if webhook_secret_file else None
    os.environ[ENV_OPTIONS] = options_to_env(
        url, blobs, open_read, list(webhooks), secret, max_upload, memory_budget
    )
    from jaxport.server import (
        KEEP_ALIVE,
        MAX_HEAD,
        DeadlineH11Protocol,
        connection_cap,
        raise_open_file_limit,
    )

    cap = connection_cap(max_connections, raise_open_file_limit())  # workers inherit it
    config = uvicorn.Config(
        "jaxport.server:app_from_env", factory=True, host=host, port=port,
        workers=workers, log_level="warning", access_log=False, http=DeadlineH11Protocol,
        limit_concurrency=cap, timeout_keep_alive=KEEP_ALIVE,
        h11_max_incomplete_event_size=MAX_HEAD,
    )  # fmt: skip
    _run(config, host, workers)


def _set_presign_expires(seconds: int | None) -> None:
    """Hands ``--presign-expires`` to the server's processes (they inherit the environment), or
    checks ``$JAXPORT_PRESIGN_EXPIRES`` now rather than at the first transfer.

    Raises:
        InvalidNameError: the environment variable is not 0 to 7 days in seconds.
    """
    from jaxport.server import configured_expires

    if seconds is not None:
        os.environ["JAXPORT_PRESIGN_EXPIRES"] = str(seconds)
    configured_expires()


def _announce(host: str, sockets: list[socket.socket], workers: int) -> None:
    """Prints the server's URL on stderr, with the port it listens on (``--port 0``: the one
    the system chose)."""
    port = sockets[0].getsockname()[1]
    where = f"[{host}]" if ":" in host else host
    click.echo(
        f"jaxport registry server on http://{where}:{port} ({workers} process(es))", err=True
    )


def _run(config: Any, host: str, workers: int) -> None:
    """Runs uvicorn as ``uvicorn.run`` does, printing the URL only once the server accepts
    connections: one process, from its startup (after the application's lifespan startup and
    the listening socket: ``Server.started``); several, once every worker says it has started
    (uvicorn's supervisor asks each over its pipe, before it starts watching them; where
    uvicorn cannot ask, once the socket listens).

    Raises:
        SystemExit: the server could not start (uvicorn's exit status 3), as ``uvicorn.run``.
    """
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    if workers > 1:

        class AnnouncingSupervisor(Multiprocess):
            def init_processes(self) -> None:
                super().init_processes()
                # an older uvicorn has no readiness check: there the listening socket's backlog
                # holds connections until the first worker accepts them.
                waits = [getattr(p, "wait_until_ready", None) for p in self.processes]
                if all(w is None or w(_READY_WITHIN, self.should_exit) for w in waits):
                    _announce(host, self.sockets, workers)  # else a worker died, or a signal

        sock = config.bind_socket()
        sock.listen(config.backlog)
        AnnouncingSupervisor(config, sockets=[sock]).run()
        return

    class AnnouncingServer(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:
                _announce(host, [s for srv in self.servers for s in srv.sockets], workers)

    server = AnnouncingServer(config)
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    if not server.started:
        sys.exit(_STARTUP_FAILURE)
