"""Regenerates schema/_generated.py from schema/jaxport.fbs with flatc (see schema/_codegen.py)."""

from pathlib import Path

from jaxport.schema._codegen import generate_python

ROOT = Path(__file__).resolve().parents[1]

if __name__ == "__main__":
    (ROOT / "schema" / "_generated.py").write_text(generate_python(ROOT / "schema" / "jaxport.fbs"))
    print("wrote schema/_generated.py")
