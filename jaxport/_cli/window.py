"""How the CLI shows jax's 6-month window: a line for ``inspect`` and ``show`` (the table of
``audit expiring`` is ``render_audit.windows_table``)."""

from __future__ import annotations

from typing import Any

__all__ = ["window_text"]


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
