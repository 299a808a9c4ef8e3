"""The CLI package's shape, read from its source with ``ast`` (nothing is imported): no import
circle among its modules (an import inside a function counts: a circle is a design knot even
where Python tolerates it), and no module over ``MAX_LINES`` lines (issue 25 §4)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CLI = Path(__file__).resolve().parent.parent / "jaxport" / "_cli"
PACKAGE = "jaxport._cli"
MAX_LINES = 600


def _module_name(path: Path) -> str:
    return PACKAGE if path.stem == "__init__" else f"{PACKAGE}.{path.stem}"


def cli_imports(sources: dict[str, str]) -> dict[str, set[str]]:
    """``{module: the CLI modules it imports}`` for ``sources`` (``{module: source}``), every
    form: ``import jaxport._cli.x``, ``from jaxport._cli import x``, ``from jaxport._cli.x
    import y``, anywhere in the module. The package itself (``__init__``) is not an edge."""
    graph: dict[str, set[str]] = {}
    for module, source in sources.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module)
                found |= {f"{node.module}.{a.name}" for a in node.names}
        graph[module] = {m for m in found if m in sources and m not in (module, PACKAGE)}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle of ``graph``, once each, as the modules along it (a depth-first
    search; a circle is reported from its least module name)."""
    found: list[list[str]] = []

    def visit(start: str, node: str, path: list[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt == start:
                found.append([*path, start])
            elif nxt > start and nxt not in path:
                visit(start, nxt, [*path, nxt])

    for start in sorted(graph):
        visit(start, start, [start])
    return found


def _sources() -> dict[str, str]:
    return {_module_name(p): p.read_text() for p in sorted(CLI.glob("*.py"))}


def test_the_cli_modules_import_no_circle():
    graph = cli_imports(_sources())
    assert len(graph) >= 10 and any(graph.values())  # the package is there and read
    assert cycles(graph) == []


@pytest.mark.parametrize(
    ("sources", "circle"),
    [
        (
            {
                "jaxport._cli.a": "from jaxport._cli import b",
                "jaxport._cli.b": "import jaxport._cli.a",
            },
            ["jaxport._cli.a", "jaxport._cli.b", "jaxport._cli.a"],
        ),
        (
            {
                "jaxport._cli.a": "def f():\n    from jaxport._cli.b import x\n",
                "jaxport._cli.b": "from jaxport._cli.c import y",
                "jaxport._cli.c": "from jaxport._cli.a import z",
            },
            ["jaxport._cli.a", "jaxport._cli.b", "jaxport._cli.c", "jaxport._cli.a"],
        ),
    ],
)
def test_the_check_sees_a_circle(sources, circle):
    assert cycles(cli_imports(sources)) == [circle]


def test_no_cli_module_is_over_600_lines():
    lengths = {p.name: len(p.read_text().splitlines()) for p in CLI.glob("*.py")}
    assert {name: n for name, n in lengths.items() if n > MAX_LINES} == {}
