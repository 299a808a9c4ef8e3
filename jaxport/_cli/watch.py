"""``jaxport watch``: one look at the package index for new jax and jaxlib releases, and what
each new jax release does to the registry's variants (``Registry.watch_jax``). For cron; the
audit queue's workers run the same periodically (``jaxport audit-worker --watch CRON``)."""

from __future__ import annotations

from pathlib import Path

import click

from jaxport._cli.common import CliContext, emit, pass_ctx
from jaxport._cli.output import json_option

__all__ = ["watch"]


def _webhook_urls(
    ctx: click.Context, param: click.Parameter, urls: tuple[str, ...]
) -> tuple[str, ...]:
    """Each ``--webhook`` is an http(s) URL with a host, checked before the index is read: a
    release recorded as seen is never announced again, so a typo must not cost its event.
    (The value is not echoed: a webhook URL may carry a secret.)"""
    from urllib.parse import urlsplit

    for url in urls:
        try:
            parts = urlsplit(url)
            fine = parts.scheme in ("http", "https") and bool(parts.hostname)
        except ValueError:  # e.g. http://[::1
            fine = False
        if not fine:
            raise click.BadParameter(
                "expected an http(s) URL such as https://hooks.example.com/jaxport"
            )
    return urls


@click.command("watch")
@click.option(
    "--index-url",
    metavar="URL",
    help="The package index's root (https://host/simple/), instead of the one pip is "
    "configured with (PIP_INDEX_URL, pip config, else https://pypi.org/simple/).",
)
@click.option("--dry-run", is_flag=True, help="Judge and report only: record nothing.")
@click.option("--pre", "prereleases", is_flag=True, help="Count pre- and dev-releases too.")
@click.option("--no-enqueue", is_flag=True, help="Do not enqueue the new releases' full audits.")
@click.option(
    "--webhook",
    "webhooks",
    multiple=True,
    metavar="URL",
    callback=_webhook_urls,
    help="Also POST each new release's event here (repeat), as `jaxport serve --webhook` "
    "does; a registry server sends its own.",
)
@click.option(
    "--webhook-secret-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A file holding the HMAC key of the webhooks' X-Jaxport-Signature.",
)
@json_option
@pass_ctx
def watch(
    ctx: CliContext,
    index_url: str | None,
    dry_run: bool,
    prereleases: bool,
    no_enqueue: bool,
    webhooks: tuple[str, ...],
    webhook_secret_file: Path | None,
    as_json: bool,
) -> None:
    """Look for jax and jaxlib releases newer than the registry has seen (one shot: for cron).

    For each new jax release: a static audit of every variant against it (what the release
    number decides: calling conventions, jax's HloSharding rule, its 6-month window against
    the release's upload day), full audits enqueued per platform in that release's
    environment (a PostgreSQL registry with the audit queue), the release recorded as seen
    and one jax-release event: how many variants stay ok, expire (per window end date), are
    refused statically and need rescue. The first watch of a registry takes the newest
    release alone. Through a registry server the server watches, with its own index (an
    admin token without prefixes). Exits 0, also when nothing is new; 1 when a webhook did not
    take an event after its retries (``WebhookError``, after the report is printed).
    """
    secret = webhook_secret_file.read_text().strip() if webhook_secret_file else None
    failed: list[str] = []
    with ctx.registry() as reg:
        before = reg.events(limit=1)
        report = reg.watch_jax(
            index_url=index_url, dry_run=dry_run, prereleases=prereleases,
            enqueue=not no_enqueue,
        )  # fmt: skip
        if webhooks and not dry_run and report.releases:
            failed = _deliver(reg, before[0].id if before else 0, list(webhooks), secret)
    from jaxport._cli.render_watch import watch_text

    emit(as_json, report, watch_text)
    if failed:
        from jaxport._errors import WebhookError

        raise WebhookError(
            f"{len(failed)} webhook delivery(ies) failed: {'; '.join(failed)}; the watch is "
            "recorded and its events are in `jaxport log`"
        )


def _deliver(reg: object, after: int, urls: list[str], secret: str | None) -> list[str]:
    """POSTs this watch's ``jax-release`` events (those after event ``after``) to ``urls``,
    with the server's retries (``server/_webhooks.py``); the deliveries that failed, one line
    each (``Webhooks.close``)."""
    import logging

    from jaxport.server import Webhooks

    # Each try is a line of a server's log; the command says what failed once (WebhookError).
    logging.getLogger("jaxport.server.webhooks").addHandler(logging.NullHandler())
    events = [
        e for e in reg.events(limit=100)  # type: ignore[attr-defined]
        if e.id > after and e.kind == "jax-release"
    ]  # fmt: skip
    hooks = Webhooks(urls, secret)
    for event in reversed(events):
        hooks.deliver(event)
    return hooks.close(timeout=None)
