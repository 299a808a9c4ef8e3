"""Public names listed once: a package's ``__init__`` imports each public name in one statement
(``from MODULE import NAME as NAME``), eagerly or under ``if TYPE_CHECKING:``, and ``attach``
derives the rest from those statements.

- ``__all__``: every name imported ``as`` itself, sorted as ruff's RUF022 sorts it;
- ``__getattr__``: a name imported under ``TYPE_CHECKING`` is imported from its module on first
  use (``import jaxport`` loads neither jax nor SQLAlchemy), then kept in the package;
- ``__dir__``: the package's globals and ``__all__``.

Type checkers read the same statements (the ``as`` form re-exports a name under mypy's
``--no-implicit-reexport``), so a name is added to a package by adding its import, once.
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["attach", "isort_key"]


def isort_key(name: str) -> tuple[int, str]:
    """RUF022's order: SCREAMING_CASE, then CamelCase, then the rest."""
    if name.isupper() or (name.upper() == name and "_" in name):
        return (0, name)
    return (1, name) if name[:1].isupper() else (2, name)


def attach(
    package: str,
) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """``(__all__, __getattr__, __dir__)`` of ``package``, read from its ``__init__``'s source
    (see the module's doc). Call it at the end of the ``__init__``, after its eager imports."""
    module = sys.modules[package]
    public, lazy = _listed(_source(module))
    names = sorted(public, key=isort_key)

    def __getattr__(name: str) -> Any:
        where = lazy.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(_imported(where, package), name)
        setattr(module, name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(module)) | set(names))

    return names, __getattr__, __dir__


def _source(module: Any) -> str:
    """The ``__init__``'s source (UTF-8, as every jaxport module), read by its loader."""
    spec = module.__spec__
    try:
        data = spec.loader.get_data(spec.origin)
    except (AttributeError, OSError) as e:  # pragma: no cover  (an install without sources)
        raise ImportError(f"{spec.name} needs its source to list its public names") from e
    return bytes(data).decode("utf-8")


def _listed(source: str) -> tuple[list[str], dict[str, str]]:
    """The names the module's top-level ``from M import X as X`` statements re-export, and
    the module of each one imported under ``if TYPE_CHECKING:``."""
    public: list[str] = []
    lazy: dict[str, str] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.ImportFrom):
            public += _reexported(node)
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            for inner in node.body:
                if isinstance(inner, ast.ImportFrom):
                    names = _reexported(inner)
                    public += names
                    assert inner.module is not None and inner.level == 0, "absolute imports"
                    lazy |= dict.fromkeys(names, inner.module)
    return public, lazy


def _reexported(node: ast.ImportFrom) -> list[str]:
    return [a.name for a in node.names if a.asname == a.name]


def _is_type_checking(test: ast.expr) -> bool:
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"


def _imported(module: str, package: str) -> Any:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name != module:
            raise
        raise ModuleNotFoundError(
            f"{module} is not importable: Python found the source folder "
            f"{sys.modules[package].__path__[0]} (the checkout's root is the working "
            "directory) instead of the installed package; run from another directory, or use "
            "`pytest` for the tests",
            name=module,
        ) from None
