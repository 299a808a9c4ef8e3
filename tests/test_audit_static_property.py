"""Static verdicts never claim more than a full audit, over the whole corpus (issue 24 §3).

For every (variant, platform, jax release) that has both a static verdict and a full audit:
static ``ok`` implies full ``ok`` (today a static verdict is never ``ok``: the property guards
that rule), and static ``incompatible`` implies full not ``ok`` (a refusal decided from
recorded facts is one the full audit measures too).

The corpus: the golden archives (tests/golden), the archives of older jax releases
(tests/data), every entry of jax's own back-compat data as tests/test_jax_backcompat.py builds
it (with its golden examples where jax's test compares outputs plainly), and the library models
of tests/test_libraries.py. The jax releases: the running one, and each interpreter of another
release found under ``$JAXPORT_TEST_JAX_VENVS`` (a directory of venvs; default the repository's
``.jax-venvs/``, which scripts/test_jax_versions.sh makes in CI) where jaxport imports. The
test prints which releases it compared and how many pairs, and fails if it compared none; a
release whose venv is absent here is named as not checked, not silently passed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import pytest

import jaxport

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
#: The releases scripts/test_jax_versions.sh makes venvs for.
RELEASES = ("0.7.0", "0.8.3", "0.9.2", "0.10.2", "0.11.2", "0.12.0.1")


def _interpreters() -> tuple[list[str | None], list[str]]:
    """``([None (this process's jax), other interpreters...], [releases not found])``."""
    root = Path(os.environ.get("JAXPORT_TEST_JAX_VENVS") or ROOT / ".jax-venvs")
    found: list[str | None] = [None]
    missing = []
    for release in RELEASES:
        python = root / f"jax-{release}" / "bin" / "python"
        if release == jax.__version__:
            continue
        if python.is_file() and _has_jaxport(str(python)):
            found.append(str(python))
        else:
            missing.append(release)
    return found, missing


def _has_jaxport(python: str) -> bool:
    try:
        done = subprocess.run([python, "-c", "import jaxport.audit"], capture_output=True,
                              timeout=120, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _corpus() -> Iterator[tuple[str, Any, dict[str, Any]]]:
    """``(name, source, push keywords)`` for every archive and model of the corpus."""
    for path in sorted([*TESTS.glob("golden/*.jaxport"), *TESTS.glob("data/**/*.jaxport")]):
        yield f"file-{path.parent.name}-{path.stem}".replace("_", "-"), path, {}
    sys.path.insert(0, str(TESTS))
    import test_jax_backcompat as backcompat
    import test_libraries as libraries

    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)  # as jax's back-compat tests build them
    try:
        for i, entry in enumerate(backcompat.ENTRIES):
            try:
                exp = backcompat._exported(entry)
            except Exception:  # jax itself cannot build it: test_jax_backcompat reports it
                continue
            allow = backcompat._trusted_targets(exp)
            examples = backcompat._golden(entry, exp)
            yield f"jax-entry-{i}", exp, {"allow_custom_calls": allow, "examples": examples}
    finally:
        jax.config.update("jax_enable_x64", previous)
    for library, make in libraries.MODELS.items():
        try:
            model, _, _ = make()
        except pytest.skip.Exception:
            continue
        yield f"library-{library}", model, {}


def test_static_ok_implies_full_ok_over_the_corpus(tmp_path, monkeypatch, capsys):
    reg = jaxport.Registry(f"sqlite:///{tmp_path / 'corpus.db'}", blobs=tmp_path / "blobs")
    pushed = 0
    for name, source, kwargs in _corpus():
        try:
            reg.push(source, name, **kwargs)
            pushed += 1
        except jaxport.JaxportError:  # refused here (e.g. a newer module): nothing to compare
            continue
    monkeypatch.setenv("JAX_ENABLE_X64", "1")  # the workers, for the f64 entries
    interpreters, missing = _interpreters()
    compared: dict[str, int] = {}
    violations = []
    for python in interpreters:
        static = {_key(f): f for f in reg.audit(level="static", python=python, store=False)}
        full = {_key(f): f for f in reg.audit(python=python, store=False, workers=2)}
        for key, s in static.items():
            f = full.get(key)
            if f is None:
                continue
            compared[key[-1]] = compared.get(key[-1], 0) + 1
            if (s.status == "ok" and f.status != "ok") or (
                s.status == "incompatible" and f.status == "ok"
            ):
                violations.append(f"{key}: static {s.status} ({s.reason}); full {f.status} "
                                  f"({f.reason})")  # fmt: skip
    absent = ", ".join(missing) or "none"
    with capsys.disabled():
        print(f"\nstatic vs full: {pushed} variants pushed; pairs compared per jax: {compared}; "
              f"releases without a venv here (not checked): {absent}")  # fmt: skip
    assert sum(compared.values()) > 0
    assert violations == [], "\n".join(violations)


def _key(f: Any) -> tuple[str, int, str, str, str]:
    return (f.name, f.version, f.digest, f.platform, f.jax_version)
