"""Lines of a list (a retention plan, a fleet rescue, gates) cut into 80 columns, as the
tables are: a line too long goes on under a hanging indent, never breaking a word, so names,
digests and paths stay whole and each entry still starts at its own margin."""

from __future__ import annotations

import textwrap

__all__ = ["WIDTH", "fit", "fit_clauses", "fit_lines"]

#: The width every table and list of the CLI keeps to.
WIDTH = 80


def fit(line: str, hang: int = 4, width: int = WIDTH) -> str:
    """``line`` wrapped at ``width``: the continuation lines indented ``hang`` columns more
    than ``line`` itself is. A word longer than the room is left whole (it overflows)."""
    if len(line) <= width:
        return line
    margin = " " * (len(line) - len(line.lstrip(" ")))
    return textwrap.fill(
        line.strip(" "),
        width=width,
        initial_indent=margin,
        subsequent_indent=margin + " " * hang,
        break_long_words=False,
        break_on_hyphens=False,
    )


def fit_lines(lines: list[str], hang: int = 4, width: int = WIDTH) -> str:
    """``lines``, each ``fit``, joined by newlines."""
    return "\n".join(fit(line, hang, width) for line in lines)


def fit_clauses(text: str, hang: str = "  ", sep: str = "; ", width: int = WIDTH) -> list[str]:
    """``text``'s ``sep``-separated clauses in as few lines as fit ``width``, the lines after
    the first indented by ``hang``, breaking only between clauses (a clause longer than the
    room is ``fit``)."""
    lines: list[str] = []
    for clause in text.split(sep):
        joined = f"{lines[-1]}{sep}{clause}" if lines else ""
        if lines and len(joined) + len(sep.rstrip()) <= width:
            lines[-1] = joined
        else:
            lines.append(f"{hang if lines else ''}{clause}")
    last = len(lines) - 1
    return [
        fit(line + ("" if i == last else sep.rstrip()), 4, width) for i, line in enumerate(lines)
    ]
