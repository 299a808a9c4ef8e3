"""Renderings of the jax-release watcher (``jaxport watch``) and ``jaxport audit forecast``, in
the conventions of ``render.py`` (80 columns, key columns never cut, short digests)."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Column, Table
from rich.text import Text

from jaxport._cli.render import short_digest

__all__ = ["forecast_table", "watch_text"]

_OUTLOOK_STYLE = {"ok": "green", "expires": "yellow", "refused": "red"}
#: Window end dates listed per release before "and N more".
_DATES = 6


def watch_text(report: Any) -> Any:
    """``jaxport watch``: the new releases, then per new jax release what it says."""
    mode = " (dry run: nothing recorded)" if report.dry_run else ""
    if not report.new:
        return f"no new jax or jaxlib release on {report.index}{mode}"
    new = ", ".join(f"{r.package} {r.version}" for r in report.new)
    parts: list[Any] = [Text(f"new on {report.index}: {new}{mode}")]
    for s in report.releases:
        parts.append(_release(s))
    return Group(*parts)


def _release(s: Any) -> Any:
    """One jax release's summary: the counts, the window end dates, the refusals, the queue."""
    lines = [
        f"jax {s.version} (published {s.published}): {s.variants} variant(s) judged in "
        f"{s.seconds:.2f} s",
        f"  stay ok {s.ok}, expire {s.expires}, refused {s.refused}, need rescue {s.rescue}",
    ]
    if s.judged_by:
        lines.append(f"  judged by {s.judged_by}")
    dates = list(s.expiring.items())
    for day, n in dates[:_DATES]:
        lines.append(f"  {n} expire(s): window ended {day}")
    if len(dates) > _DATES:
        lines.append(f"  and {len(dates) - _DATES} more window end date(s) (--json)")
    for reason, n in s.refusals.items():
        lines.append(f"  {n} refused: {reason}")
    lines.append(f"  full audits: {s.queue}")
    return Text("\n".join(lines))


def forecast_table(rows: list[Any]) -> Table:
    """``audit forecast``: one row per variant, in registry order. "runs on" the releases
    full audits found it ok under (the newest, and how many more), "window ends" jax's
    promise for it, the last column what the newest release the watcher saw says. Fits 80
    columns: the variant's digest goes under its name, so "runs on" keeps its room (every
    release and the reasons are in ``--json``)."""
    newest = next((r.newest_release for r in rows if r.newest_release), None)
    table = Table(
        Column("variant", overflow="fold", min_width=len("sha256:") + 12),
        Column("written", no_wrap=True),
        Column("runs on", no_wrap=True),
        Column("window ends", no_wrap=True),
        Column(f"jax {newest}" if newest else "newest", no_wrap=True),
        title="forecast: " + (f"newest jax seen {newest}" if newest else "no release seen yet "
                              "(jaxport watch)"),
    )  # fmt: skip
    for r in rows:
        table.add_row(
            f"{r.name}:{r.version}\n{short_digest(r.digest)}",
            r.writer,
            _runs_on(r.runs_on),
            r.window_ends or "unknown",
            Text(r.outlook or "-", style=_OUTLOOK_STYLE.get(r.outlook, "")),
        )
    return table


def _runs_on(releases: tuple[str, ...]) -> str:
    if not releases:
        return "-"
    more = f" +{len(releases) - 1}" if len(releases) > 1 else ""
    return f"{releases[-1]}{more}"
