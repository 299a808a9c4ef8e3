"""How the CLI shows jax's 6-month window: a line for ``inspect`` and ``show``, the table of
``audit --expiring-before``."""

from __future__ import annotations

from typing import Any

from rich.table import Column, Table

__all__ = ["window_text", "windows_table"]


def window_text(w: Any) -> str:
    """One line: the window's end, whether the running jax is within it, what its own
    ``deserialize`` does, the newest jax an audit found the artifact ok under."""
    if w.window_ends is None:
        where = f"unknown (no release date for jax {w.jax_version})"
    else:
        state = {True: "within", False: "outside: no longer promised", None: "unknown"}
        verb = "ends" if w.within_window is not False else "ended"
        where = f"{verb} {w.window_ends}; jax {w.running_jax} here: {state[w.within_window]}"
    text = f"{where}; its own deserialize {w.jax_deserialize}"
    if w.jax_deserialize == "refuses":
        text += " (jaxport reads its own format)"
    if w.last_known_release:
        text += f"; ok under jax {w.last_known_release} (audited)"
    return text


def windows_table(rows: list[Any]) -> Table:
    """``audit --expiring-before``: one row per variant, soonest end first (unknown last).

    "jax" is the release that wrote it, "jax reads" what the running jax's own ``deserialize``
    does with it (its window rule), "last ok" the newest jax a stored audit found it ok under.
    Fits 80 columns (the platforms are in ``--json``)."""
    table = Table(
        Column("variant"),
        Column("jax", no_wrap=True),
        Column("window ends"),
        Column("jax reads"),
        Column("last ok", no_wrap=True),
        title="variants whose jax window ends before the date",
    )
    from jaxport._cli.render import short_digest

    for r in sorted(rows, key=lambda r: (r.window.window_ends or "9999", r.name, r.version)):
        w = r.window
        ends = w.window_ends or "unknown"
        if w.within_window is False:
            ends += " (past)"
        table.add_row(
            f"{r.name}:{r.version} {short_digest(r.digest)}",
            w.jax_version,
            ends,
            w.jax_deserialize,
            w.last_known_release or "-",
        )
    return table
