"""The package's layering, read from its source with ``ast`` (nothing is imported).

- Data flows one way: CLI and public API (``jaxport/``) -> ``server`` -> ``registry`` (with its
  ``migrations``) -> ``audit`` -> ``export`` -> ``schema``. A package imports only packages
  below it (``RANK``); the registry's migrations and the registry import each other's public
  names (a revision computes what the registry computes).
- A package uses another only through its public names (``jaxport.export.X``), or through the
  one internal module that package declares for jaxport's own packages (``INTERNAL``:
  ``jaxport.registry._internal``), never through another private module
  (``jaxport.export._archive``), whether at module level, in a function or under
  ``TYPE_CHECKING``.
- The one exception is ``jaxport/``'s base: small modules that every package shares and that
  import nothing of jaxport but each other (``BASE``, each with its reason). The errors
  themselves are imported from ``jaxport`` (``from jaxport import CorruptArchiveError``):
  ``jaxport/__init__.py`` imports ``jaxport._errors`` eagerly and nothing else of jaxport but
  its version and loader, so no cycle. No other name of ``jaxport`` is imported below it.
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
#: The private module each package may declare for what jaxport's own packages share beyond its
#: public names (the only private import across packages, besides ``jaxport/``'s ``BASE``).
INTERNAL = "_internal"
#: Where each package sits in the data flow: a package imports only packages of lower or equal
#: rank (``jaxport``: its CLI and public API; its base modules are ``BASE``).
RANK = {"schema": 0, "export": 1, "audit": 2, "registry": 3, "migrations": 3, "server": 4,
        "jaxport": 5}  # fmt: skip
#: The private modules of ``jaxport/`` that every package may import, and why. They import
#: nothing of jaxport but each other (``test_base_modules_stay_at_the_bottom``).
BASE = {
    "_errors": "the one exception tree (jaxport/_errors.py's docstring draws it); modules "
    "import the errors from ``jaxport``, and registry/_http.py and server/_errors.py use the "
    "module itself to map an error's type name on the wire to its class and back",
    "_lazy": "every package's __init__ derives __all__ and its lazy loader from its imports",
    "_io": "atomic_write: archives, models, pulled files and blobs are written the same way",
    "_files": "bounded reads of regular files (no FIFO, no device, a size cap), for every "
    "reader of a path: archives, models, pushes, the server's uploads",
    "_grammar": "the rules for names shared by the registry's names and a model's methods",
    "_environ": "the allow-listed environment of every child process (sandbox, converter, "
    "audit worker, probe)",
    "_standins": "the policy for pytree nodes a reader does not know, shared by the reader "
    "(export) and the audit worker",
    "_window": "jax's 6-month support window as data: export checks headers against it, the "
    "registry reports each variant's window",
    "_signing": "Sigstore signing and verifying of a digest, shared by jaxport.sign_file and "
    "the registry's signatures",
    "_children": "every child process jaxport starts (sandbox workers, the converter, audit "
    "workers, probes, rescue, managed environments) dies with its parent and has a deadline",
    "_extras": "the one place an optional capability's library is imported, and the extra "
    "its error names (MissingExtraError), for every package that has one",
    "_npz": "reading an untrusted .npz without believing its headers, for `jaxport run`'s "
    "inputs and the golden-examples blobs a registry server receives (audit)",
    "_compiled_host": "the host key of a compiled executable set, computed alike by "
    "`jaxport compile`'s child (jaxport/) and the registry that checks a set before use",
}


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


def _package(path: str) -> str:
    return PACKAGES[path.split("/", 1)[0]]


def _imported(tree: ast.Module) -> list[tuple[int, str]]:
    """``(line, dotted name)`` of every jaxport module or name imported, anywhere in the
    module (functions and ``TYPE_CHECKING`` blocks included)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return [(line, name) for line, name in out if name.split(".")[0] == "jaxport"]


def _target(name: str) -> tuple[str, str | None]:
    """The package a dotted jaxport name belongs to and the private module it names, if any:
    ``jaxport.export._archive.x`` -> ("export", "_archive"); ``jaxport._io`` -> ("jaxport",
    "_io"); ``jaxport.CorruptArchiveError`` -> ("jaxport", None)."""
    parts = name.split(".")[1:]
    if parts and parts[0] in RANK:
        package, rest = parts[0], parts[1:]
    else:
        package, rest = "jaxport", parts
    private = rest[0] if rest and rest[0].startswith("_") and not rest[0].startswith("__") else None
    return package, private


def _eager_names() -> set[str]:
    """The names ``jaxport/__init__.py`` imports at module level (the errors, the version)."""
    tree = ast.parse((ROOT / "jaxport" / "__init__.py").read_text())
    return {
        a.asname or a.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom)
        for a in node.names
    }


def _problems() -> list[str]:
    eager = _eager_names()
    out = []
    for path, tree in _trees():
        here = _package(path)
        for line, name in _imported(tree):
            package, private = _target(name)
            where = f"{path}:{line}: {name}"
            if package == here:
                continue
            if package == "jaxport":  # its base and its errors, never its public API or CLI
                if private is not None and private not in BASE:
                    out.append(f"{where}: a private module of jaxport/ outside its base")
                elif private is None and name.split(".")[1] not in eager:
                    out.append(f"{where}: only the errors and the version come from jaxport")
            elif RANK[package] > RANK[here] and {here, package} != {"registry", "migrations"}:
                out.append(f"{where}: {here} imports {package}, against the data flow")
            elif private is not None and private != INTERNAL:
                out.append(f"{where}: a private module of {package}")
    return out


def test_packages_use_each_other_through_public_names_along_the_data_flow():
    assert _problems() == []


def test_base_modules_stay_at_the_bottom():
    """A base module imports no package of jaxport, only other base modules."""
    for module in BASE:
        tree = ast.parse((ROOT / "jaxport" / f"{module}.py").read_text())
        for line, name in _imported(tree):
            package, private = _target(name)
            assert package == "jaxport" and private in BASE, f"jaxport/{module}.py:{line}: {name}"


@pytest.mark.parametrize(
    ("path", "source", "problem"),
    [
        ("registry/_x.py", "from jaxport.export._archive import dumps", "private module of export"),
        (
            "server/_x.py",
            "from jaxport.registry._sql import SqlBackend",
            "private module of registry",
        ),
        ("registry/_x.py", "from jaxport.export import _archive", "private module of export"),
        ("audit/_x.py", "import jaxport.export._archive", "private module of export"),
        ("export/_x.py", "from jaxport.registry import Registry", "against the data flow"),
        ("audit/_x.py", "from jaxport.registry import Registry", "against the data flow"),
        ("registry/_x.py", "from jaxport.server import create_app", "against the data flow"),
        ("export/_x.py", "from jaxport._cli import main", "outside its base"),
        ("export/_x.py", "from jaxport import Registry", "only the errors and the version"),
    ],
)
def test_the_check_sees_each_kind_of_problem(monkeypatch, path, source, problem):
    monkeypatch.setattr(
        "test_layering._trees", lambda: [(path, ast.parse(f"def f():\n    {source}\n"))]
    )
    (found,) = _problems()
    assert problem in found, found
