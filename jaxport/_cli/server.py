"""``jaxport serve``, ``jaxport token create|list|revoke`` and ``jaxport log``: the registry
server and what it records (``server/``, ``registry/_tokens.py``, ``registry/_events.py``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from jaxport._cli.output import json_option
from jaxport._errors import InvalidNameError

__all__ = ["log_cmd", "serve", "token"]

_DURATION = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _seconds(ctx: click.Context, param: click.Parameter, text: str | None) -> float | None:
    if text is None:
        return None
    unit = text[-1:].lower()
    number = text[:-1] if unit in _DURATION else text
    try:
        value = float(number) * _DURATION.get(unit, 1)
    except ValueError:
        raise click.BadParameter(
            f"expected a duration such as 90d, 12h or 3600, got {text!r}"
        ) from None
    if not value > 0:
        raise click.BadParameter("a duration must be > 0")
    return value


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
@click.option("--upgrade", is_flag=True, help="Upgrade an older database schema first.")
@click.pass_context
def serve(
    ctx: click.Context, host: str, port: int, workers: int, open_read: bool,
    webhooks: tuple[str, ...], webhook_secret_file: str | None, max_upload: int | None,
    memory_budget: int | None, max_connections: int, upgrade: bool,
) -> None:  # fmt: skip
    """Serve the registry over HTTP: the API at /api/v1 (OpenAPI at /api/v1/openapi.json),
    web pages at /. The registry is --registry / --blobs (or their environment variables);
    clients need a token (jaxport token create) and no database password."""
    from jaxport._extras import require
    from jaxport.registry import Registry, RegistryConfig, is_server_url

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
    click.echo(f"jaxport registry server on http://{host}:{port} ({workers} process(es))", err=True)
    uvicorn.run(
        "jaxport.server:app_from_env", factory=True, host=host, port=port,
        workers=workers, log_level="warning", access_log=False, http=DeadlineH11Protocol,
        limit_concurrency=cap, timeout_keep_alive=KEEP_ALIVE,
        h11_max_incomplete_event_size=MAX_HEAD,
    )  # fmt: skip


@click.group()
def token() -> None:
    """Bearer tokens of the registry server (scope admin through a server; or the database)."""


@token.command("create")
@click.argument("name")
@click.option(
    "--scope",
    type=click.Choice(["read", "write", "admin"]),
    default="read",
    show_default=True,
    help="read < write < admin (each includes the ones before).",
)
@click.option(
    "--prefix",
    "prefixes",
    multiple=True,
    metavar="PREFIX",
    help="Limit the token to names starting with PREFIX (repeat).",
)
@click.option(
    "--expires-in",
    callback=_seconds,
    metavar="DURATION",
    help="Expire after this long: 90d, 12h, 30m or seconds.",
)
@json_option
@click.pass_context
def token_create(
    ctx: click.Context, name: str, scope: str, prefixes: tuple[str, ...],
    expires_in: float | None, as_json: bool,
) -> None:  # fmt: skip
    """Make a token called NAME; its secret is printed this once (stdout), never stored."""
    with ctx.obj.registry(create=True) as reg:
        new = reg.tokens.create(name, scope, prefixes=prefixes, expires_in=expires_in)
    if as_json:
        from jaxport._cli.output import emit_json, to_json

        emit_json({"token": to_json(new.info), "secret": new.secret})
        return
    click.echo(new.secret)
    click.echo(f"token {name!r} ({scope}) made: the secret above is shown only now", err=True)


@token.command("list")
@json_option
@click.pass_context
def token_list(ctx: click.Context, as_json: bool) -> None:
    """Every token: name, scope, prefixes, expiry, state (no secrets)."""
    with ctx.obj.registry() as reg:
        tokens = reg.tokens.list()
    if as_json:
        from jaxport._cli.output import emit_json, to_json

        emit_json({"tokens": to_json(tokens)})
        return
    for t in tokens:
        state = "revoked" if t.revoked_at else ("expired" if not t.active else "active")
        expiry = _when(t.expires_at) if t.expires_at else "never"
        prefixes = ",".join(t.prefixes) or "*"
        click.echo(f"{t.name:<20} {t.scope:<6} {prefixes:<16} expires {expiry:<20} {state}")


@token.command("revoke")
@click.argument("name")
@click.pass_context
def token_revoke(ctx: click.Context, name: str) -> None:
    """Revoke the token NAME: its requests get 401 from now on."""
    with ctx.obj.registry() as reg:
        reg.tokens.revoke(name)
    click.echo(f"token {name!r} revoked")


@click.command("log")
@click.argument("name", required=False)
@click.option(
    "--limit",
    default=50,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="Events per page.",
)
@click.option(
    "--before",
    type=click.IntRange(min=1),
    metavar="ID",
    help="Only events older than this id (the next page).",
)
@json_option
@click.pass_context
def log_cmd(
    ctx: click.Context, name: str | None, limit: int, before: int | None, as_json: bool
) -> None:
    """The event log (of NAME only, if given), newest first: pushes, alias moves, deletes, gc,
    signing and token changes, with who made each (a token's name, or local:USER)."""
    with ctx.obj.registry() as reg:
        events = reg.events(name=name, limit=limit, before=before)
    if as_json:
        from jaxport._cli.output import emit_json, to_json

        emit_json({"events": to_json(events)})
        return
    for e in events:
        click.echo(f"{e.id:>6} {_when(e.at)} {e.actor:<16} {e.kind:<12} {_what(e)}")


def _when(seconds: float) -> str:
    """Local time, as every other table shows it (JSON gives ISO 8601 in UTC)."""
    from jaxport._cli.render import local_time

    return local_time(seconds, to_the_second=True)


def _what(event: Any) -> str:
    where = f"{event.name}:{event.version}" if event.version else (event.name or "")
    detail = event.detail
    extra = {
        "alias": lambda: f"@{detail.get('alias')}",
        "token-create": lambda: f"token {detail.get('token')} ({detail.get('scope')})",
        "token-revoke": lambda: f"token {detail.get('token')}",
        "gc": lambda: f"{detail.get('removed')} blob(s), {detail.get('bytes')} bytes",
    }.get(event.kind)
    return f"{where} {extra()}".strip() if extra else where
