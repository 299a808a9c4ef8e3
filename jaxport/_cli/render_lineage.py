"""How ``jaxport lineage`` draws a version's lineage (a tree cut to 80 columns, then the
provenance) and the provenance rows ``show`` prints (``Registry.lineage``'s ``Lineage``)."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any

__all__ = ["lineage_text", "provenance_rows"]

#: The width the tree is cut to, in columns.
WIDTH = 80


def lineage_text(lineage: Any) -> str:
    """The tree (the oldest source at the top, this version marked ``*``, what derives from
    it below), each line cut to ``WIDTH`` columns, then the provenance (whole values, as
    ``show`` prints them: the terminal wraps them)."""
    lines: list[str] = []
    indent = ""
    for node in reversed(lineage.ancestors):
        lines.append(_line(indent, node))
        indent += "    "
    marked = f"{lineage.name}:{lineage.version} *"
    lines.append(_cut(f"{indent[:-4]}{'└── ' if indent else ''}{marked}{_how(lineage)}"))
    lines += _tree(lineage.descendants, indent)
    if lineage.truncated:
        lines.append("(more versions than shown: see --depth, or --json)")
    lines.append("")
    lines.append(f"provenance of {lineage.name}:{lineage.version}")
    width = max(len(k) for k, _ in provenance_rows(lineage))
    lines += [f"  {k.ljust(width)}  {v}" for k, v in provenance_rows(lineage)]  # not cut
    return "\n".join(lines)


def _line(indent: str, node: Any) -> str:
    branch = "└── " if indent else ""
    return _cut(f"{indent[:-4]}{branch}{node}{_how(node)}{_when(node)}")


def _tree(nodes: Any, indent: str) -> Iterator[str]:
    for i, node in enumerate(nodes):
        last = i == len(nodes) - 1
        yield _cut(f"{indent}{'└── ' if last else '├── '}{node}{_how(node)}{_when(node)}")
        yield from _tree(node.children, indent + ("    " if last else "│   "))


def _how(node: Any) -> str:
    state = f"  ({node.state})" if getattr(node, "state", "live") == "deleted" else ""
    return f"  {node.derivation}{state}" if node.derivation else state


def _when(node: Any) -> str:
    if node.created_at is None:
        return ""
    return "  " + datetime.datetime.fromtimestamp(node.created_at).strftime("%Y-%m-%d %H:%M")


def _cut(line: str) -> str:
    return line if len(line) <= WIDTH else line[: WIDTH - 1] + "…"


def provenance_rows(lineage: Any) -> list[tuple[str, str]]:
    """``(label, value)`` of a version's lineage and provenance, for ``lineage`` and ``show``;
    ``unknown`` where the pushing client did not tell."""
    p = lineage.provenance
    source = lineage.derived_from
    derived = "none recorded"
    if source is not None:
        gone = " (deleted)" if source.state == "deleted" and source.name is not None else ""
        derived = f"{source}{gone}, by {lineage.derivation}"
    jax = "unknown" if p.jax_version is None else f"{p.jax_version} (jaxlib {p.jaxlib_version})"
    who = p.user or "unknown"
    if lineage.actor is not None and lineage.actor != f"local:{p.user}":
        who += f" (recorded as {lineage.actor})"
    return [
        ("derived from", derived),
        ("git commit", p.git_commit or "unknown"),
        ("function", p.function_qualname or "unknown"),
        ("pushed with jax", jax),
        ("pushed from", p.host or "unknown"),
        ("pushed by", who),
    ]
