"""``jaxport push --description FILE``: a Markdown file as the version's description (the
metadata key ``jaxport.registry.DESCRIPTION_KEY``), refused over 64 KiB or when not UTF-8."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

import jaxport
from jaxport.registry import DESCRIPTION_KEY, MAX_DESCRIPTION_BYTES

JAXPORT = str(Path(sys.executable).with_name("jaxport"))


@pytest.fixture
def where(tmp_path: Path) -> Path:
    exported = jax.export.export(jax.jit(jnp.sin), platforms=("cpu",))(jnp.zeros(4))
    jaxport.save(exported, tmp_path / "f.jaxport")
    return tmp_path


def _push(where: Path, name: str, description: Path) -> subprocess.CompletedProcess[str]:
    url = f"sqlite:///{where / 'r.db'}"
    blobs, archive = str(where / "blobs"), str(where / "f.jaxport")
    command = [JAXPORT, "--registry", url, "--blobs", blobs, "push", archive, "--name", name,
               "--description", str(description)]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def test_push_description_stores_the_file_as_the_description(where):
    card = where / "card.md"
    card.write_text("# Card\n\nHello **team** ✓.\n", encoding="utf-8")
    done = _push(where, "f", card)
    assert done.returncode == 0, done.stderr
    with jaxport.Registry(f"sqlite:///{where / 'r.db'}", blobs=where / "blobs") as reg:
        assert reg.get("f:1").metadata == {DESCRIPTION_KEY: "# Card\n\nHello **team** ✓.\n"}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"a" * (MAX_DESCRIPTION_BYTES + 1), f"over the limit of {MAX_DESCRIPTION_BYTES}"),
        (b"\xff\xfe not text", "is not UTF-8 text"),
    ],
)
def test_push_description_refuses_a_large_or_binary_file(where, content, message):
    card = where / "card.md"
    card.write_bytes(content)
    done = _push(where, "f", card)
    assert done.returncode == 1 and done.stderr.startswith("InvalidNameError: ")
    assert message in done.stderr and "Traceback" not in done.stderr
    assert not (where / "r.db").exists()  # refused before the registry is opened
