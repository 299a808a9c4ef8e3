"""The README's Python blocks run top to bottom as written (in a fresh directory, with the
embedded registry in a temporary home). The one block fenced ``py``, a client of a registry
server at a made-up address, is what tests/test_client_backends.py and tests/test_server.py
run against a real server."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_python_blocks_run(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) >= 3
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JAXPORT_HOME", str(tmp_path / "home"))
    namespace: dict[str, object] = {"__name__": "readme"}
    for i, block in enumerate(blocks):
        code = compile(block, f"README.md python block {i + 1}", "exec")
        exec(code, namespace)  # our own documentation, not data read from an archive
    registry = namespace["reg"]
    registry.close()  # type: ignore[attr-defined]
