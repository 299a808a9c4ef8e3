"""``jaxport audit enqueue``, ``jaxport push --audit`` and ``jaxport audit-worker``: the audit
queue in a PostgreSQL registry (``registry/_queue.py``)."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import click

from jaxport._cli.common import CliContext, pass_ctx
from jaxport._cli.sign import password_from

__all__ = ["audit_worker", "enqueued_text", "worker_line"]


def enqueued_text(jobs: list[Any]) -> str:
    """``queued 4 audit job(s): cpu 2, tpu 2`` and how many were waiting already."""
    added = Counter(j.platform for j in jobs if j.job_id is not None)
    waiting = sum(1 for j in jobs if j.job_id is None)
    per = ", ".join(f"{p} {n}" for p, n in sorted(added.items()))
    text = f"queued {sum(added.values())} audit job(s)" + (f": {per}" if per else "")
    if waiting:
        text += f"\n{waiting} already waiting in the queue (not added again)"
    return text


def worker_line(finding: Any, recorded: bool) -> str:
    """One line per job: ``mlp:3 1a2b3c4d5e6f tpu ok (jax 0.10.2) recorded``."""
    reason = f": {finding.reason}" if finding.reason else ""
    kept = "recorded" if recorded else "already recorded"
    return (
        f"{finding.name}:{finding.version} {finding.digest[:12]} {finding.platform} "
        f"{finding.status} (jax {finding.jax_version}) {kept}{reason}"
    )


class _OneLine(logging.Filter):
    """Keeps procrastinate's log records to one line each: no traceback (a job's error is
    retried, and stays in the queue's events)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


def _log_without_tracebacks() -> None:
    """procrastinate's warnings and errors (psycopg's errors) and the worker's own log (what
    it compiled) on stderr, one line each, as ``LEVEL procrastinate: message``; a connection
    pool retrying is not an error."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handler.addFilter(_OneLine())
    for name, level in (
        ("procrastinate", logging.WARNING), ("psycopg", logging.ERROR),
        ("jaxport.audit_worker", logging.INFO),  # each compiled set, or why none
    ):  # fmt: skip
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(level)
        logger.propagate = False


@click.command("audit-worker")
@click.option(
    "--platform",
    "platforms",
    multiple=True,
    required=True,
    type=click.Choice(["cpu", "cuda", "rocm", "tpu"], case_sensitive=False),
    help="A platform this host has (repeat): only its jobs are taken.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Jobs audited at once, each in its own audit worker process.",
)
@click.option(
    "--until-idle",
    is_flag=True,
    help="Exit once no job of these platforms waits or runs (default: run until SIGTERM).",
)
@click.option(
    "--stalled-after",
    type=click.FloatRange(min=1),
    default=60.0,
    show_default=True,
    metavar="SECONDS",
    help="A worker silent this long is dead: its jobs go back to the queue.",
)
@click.option(
    "--compile-key", type=click.Path(dir_okay=False, path_type=Path), metavar="KEY.pem",
    help="PEM EC private key: after each passing full audit the variant is compiled for this "
    "host and its executables stored, signed (default: $JAXPORT_COMPILE_KEY).",
)  # fmt: skip
@click.option(
    "--compile-key-password-env", metavar="VAR",
    help="Read the compile key's password from this environment variable.",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print the findings as one JSON document.")
@pass_ctx
def audit_worker(
    ctx: CliContext,
    platforms: tuple[str, ...],
    concurrency: int,
    until_idle: bool,
    stalled_after: float,
    compile_key: Path | None,
    compile_key_password_env: str | None,
    as_json: bool,
) -> None:
    """Take audit jobs from the registry's queue and run them here.

    Run it on each platform's own hosts (a TPU host: --platform tpu); it takes only the jobs
    of its platforms, audits each variant in a worker process as `jaxport audit` does, and
    records each finding once. A job whose worker dies is given to another worker after
    --stalled-after seconds. The registry must be PostgreSQL, upgraded by `jaxport db upgrade`
    with jaxport[queue] installed. With --compile-key, each variant audited ok by this jax
    is then compiled here and stored as signed compiled executables (as `jaxport compile`).
    """
    seen: list[dict[str, Any]] = []
    lock = threading.Lock()

    def on_finding(finding: Any, recorded: bool) -> None:
        with lock:
            seen.append({"finding": finding, "recorded": recorded})
            if not as_json:
                click.echo(worker_line(finding, recorded))

    _log_without_tracebacks()
    password = password_from(compile_key_password_env)
    with ctx.registry() as reg:
        reg.run_audit_worker(
            [p.lower() for p in platforms], concurrency=concurrency, until_idle=until_idle,
            stalled_after=stalled_after, on_finding=on_finding, compile_key=compile_key,
            compile_key_password=password,
        )  # fmt: skip
    if as_json:
        from jaxport._cli.output import emit_json

        emit_json(seen)
