"""The package's layering, read from its source with ``ast`` (nothing is imported).

- jax's internals (``jax._src``) are imported in one module, ``export/_jax.py``, whose docstring
  names the jax releases it was checked against.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The folders of the package (pyproject.toml's package-dir) and their subpackage names.
PACKAGES = {
    "jaxport": "jaxport",
    "schema": "schema",
    "export": "export",
    "registry": "registry",
    "audit": "audit",
    "server": "server",
    "migrations": "migrations",
}
JAX_ADAPTER = "export/_jax.py"


def _modules() -> list[Path]:
    return sorted(p for folder in PACKAGES for p in (ROOT / folder).rglob("*.py"))


def _trees() -> list[tuple[str, ast.Module]]:
    return [(p.relative_to(ROOT).as_posix(), ast.parse(p.read_text(), str(p))) for p in _modules()]


def _jax_internals(tree: ast.Module) -> list[int]:
    """Lines that reach ``jax._src``: an import of it (or of ``_src`` from ``jax``), an attribute
    ``jax._src``, or a module name given to ``importlib.import_module``/``__import__``. Prose
    (docstrings, comments) may cite jax's sources."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            names = [module] + [f"{module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Attribute):
            names = ["jax._src"] if _dotted(node) == "jax._src" else []
        elif isinstance(node, ast.Call) and _dotted(node.func) in (
            "importlib.import_module",
            "import_module",
            "__import__",
        ):
            names = [a.value for a in node.args if isinstance(a, ast.Constant)]
        else:
            continue
        if any(str(n) == "jax._src" or str(n).startswith("jax._src.") for n in names):
            lines.append(node.lineno)
    return lines


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def test_only_the_adapter_imports_jax_internals():
    found = {path: lines for path, tree in _trees() if (lines := _jax_internals(tree))}
    assert set(found) == {JAX_ADAPTER}, {p: v for p, v in found.items() if p != JAX_ADAPTER}


def test_the_adapter_names_the_releases_it_was_checked_against():
    doc = ast.get_docstring(ast.parse((ROOT / JAX_ADAPTER).read_text())) or ""
    script = (ROOT / "scripts" / "test_jax_versions.sh").read_text()
    matrix = re.search(r"VERSIONS=\(([0-9. ]+)\)", script).group(1).split()  # the default
    assert len(matrix) >= 5, matrix
    for release in matrix:
        assert release in doc, f"{JAX_ADAPTER}'s docstring does not name jax {release}"


@pytest.mark.parametrize(
    "source",
    [
        "from jax._src import core",
        "import jax._src.core as core",
        "from jax import _src",
        "x = jax._src.core",
        "importlib.import_module('jax._src.core')",
    ],
)
def test_the_check_sees_every_form(source):
    assert _jax_internals(ast.parse(source)) == [1]
