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


def test_quick_start_runs(tmp_path):
    """The README's quick start, as a newcomer types it (the install line aside: this is the
    installed jaxport), with the installed ``jaxport`` command."""
    import os
    import subprocess
    import sys

    text = README.read_text()
    block = re.search(r"## Quick start\n\n```bash\n(.*?)```", text, flags=re.S)
    assert block is not None
    lines = [ln for ln in block.group(1).splitlines() if ln and not ln.startswith("pip ")]
    assert len(lines) == 4
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "JAXPORT_HOME": str(tmp_path / "home"), "COLUMNS": "80",
           "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}  # fmt: skip
    out = subprocess.run(["bash", "-euo", "pipefail", "-c", "\n".join(lines)], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "pushed tanh:1" in out.stdout and "wrote tanh-out.npz" in out.stdout
    assert "0.761594" in out.stdout and "Traceback" not in out.stderr
