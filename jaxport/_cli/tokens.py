"""``jaxport token create|list|revoke``: the registry server's bearer tokens
(``registry/_tokens.py``), through a server (scope admin) or straight in the database."""

from __future__ import annotations

import click

from jaxport._cli.common import CONTEXT, CliContext, pass_ctx
from jaxport._cli.output import json_option

__all__ = ["token"]

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


@click.group(context_settings=CONTEXT)
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
@pass_ctx
def token_create(
    ctx: CliContext, name: str, scope: str, prefixes: tuple[str, ...],
    expires_in: float | None, as_json: bool,
) -> None:  # fmt: skip
    """Make a token called NAME; its secret is printed this once (stdout), never stored."""
    with ctx.registry(create=True) as reg:
        new = reg.tokens.create(name, scope, prefixes=prefixes, expires_in=expires_in)
    if as_json:
        from jaxport._cli.output import emit_json, to_json

        emit_json({"token": to_json(new.info), "secret": new.secret})
        return
    click.echo(new.secret)
    click.echo(f"token {name!r} ({scope}) made: the secret above is shown only now", err=True)


@token.command("list")
@json_option
@pass_ctx
def token_list(ctx: CliContext, as_json: bool) -> None:
    """Every token: name, scope, prefixes, expiry, state (no secrets)."""
    with ctx.registry() as reg:
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
@pass_ctx
def token_revoke(ctx: CliContext, name: str) -> None:
    """Revoke the token NAME: its requests get 401 from now on."""
    with ctx.registry() as reg:
        reg.tokens.revoke(name)
    click.echo(f"token {name!r} revoked")


def _when(seconds: float) -> str:
    """Local time, as every other table shows it (JSON gives ISO 8601 in UTC)."""
    from jaxport._cli.render import local_time

    return local_time(seconds, to_the_second=True)
