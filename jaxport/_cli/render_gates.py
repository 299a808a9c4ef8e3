"""Protected aliases' gates as ``show`` and ``alias NAME`` print them."""

from __future__ import annotations

from typing import Any

__all__ = ["gates_text", "with_gates"]


def gates_text(checks: list[Any]) -> str:
    """Each protected alias's gates and their state for the version it points at: one line
    per alias, then one per gate (``pass``/``FAIL`` and why), each within 80 columns."""
    from jaxport._cli.wrap import fit_lines

    lines = []
    for c in checks:
        where = "points nowhere" if c.version is None else f"-> {c.version}"
        state = "" if c.version is None else ("  passes" if c.passed else "  FAILS")
        lines.append(f"@{c.gates.alias} {where}{state}: " + "; ".join(c.gates.describe()))
        for r in c.results:
            target = f" {r.target}" if r.target else ""
            lines.append(f"  {'pass' if r.passed else 'FAIL'}  {r.gate}{target}: {r.reason}")
    return fit_lines(lines)


def with_gates(rendered: Any, checks: list[Any]) -> Any:
    """``rendered`` followed by ``gates_text(checks)`` under the heading "gates" (``rendered``
    alone without protected aliases)."""
    if not checks:
        return rendered
    from rich.console import Group
    from rich.text import Text

    return Group(rendered, Text("gates", style="bold"), Text(gates_text(checks)))
