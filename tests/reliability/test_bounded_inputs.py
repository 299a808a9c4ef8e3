"""Every path bounded before it allocates (issue 15): input files are checked before reading.

Reproducers, generated here: an ``.npz`` of 260 bytes that declares 2^40 bytes (a stored
member whose ``.npy`` header lies, and a deflated member whose zip entry lies), inputs of the
wrong shape behind a large first input (nothing is read before every header is checked), a
model method called from Python with wrong arguments, and a FIFO or ``/dev/zero`` given to
``load``, ``load_model``, ``inspect``, ``push`` and ``jaxport run``.
"""

from __future__ import annotations

import io
import os
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxport
from jaxport import _npz
from jaxport._cli.runner import InputSpec, load_inputs

JAXPORT = str(Path(sys.executable).with_name("jaxport"))
F32 = jnp.float32


def _npy_header(shape: tuple[int, ...], descr: str = "<f4") -> bytes:
    text = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}"
    text += " " * (-(len(text) + 11) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode()


def lying_npz(path: Path, *, deflated: bool = False) -> Path:
    """An .npz whose one array declares 2^40 bytes (shape (2^38,) float32)."""
    member = _npy_header((2**38,)) + bytes(16)
    with zipfile.ZipFile(path, "w") as z:
        if deflated:  # the entry claims a huge size; its stream is tiny
            z.writestr(zipfile.ZipInfo("arr_0.npy"), member, zipfile.ZIP_DEFLATED)
        else:
            z.writestr("arr_0.npy", member)
    if deflated:  # rewrite the central directory's and local header's declared size
        data = bytearray(path.read_bytes())
        for sig, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
            at = data.find(sig)
            struct.pack_into("<I", data, at + offset, 2**32 - 1)
        path.write_bytes(bytes(data))
    return path


SPEC = [InputSpec("[0]", (2**38,), "float32")]


@pytest.mark.parametrize("deflated", [False, True])
def test_a_small_npz_declaring_a_terabyte_is_refused_before_allocating(
    tmp_path: Path, deflated: bool
) -> None:
    path = lying_npz(tmp_path / "x.npz", deflated=deflated)
    assert path.stat().st_size < 400
    code = (
        "import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
        "from pathlib import Path\n"
        "from jaxport._cli.runner import InputSpec, load_inputs\n"
        "from jaxport import RunError\n"
        "try:\n"
        f"    load_inputs(Path({str(path)!r}), [InputSpec('[0]', (2**38,), 'float32')], 'f')\n"
        "except RunError as e:\n"
        "    print('RunError', e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0 and out.stdout.startswith("RunError"), out.stderr
    assert "declares" in out.stdout


def test_no_array_is_read_before_every_header_is_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "x.npz"
    np.savez(path, np.zeros(1 << 20, np.float32), np.zeros((2, 5), np.float32))
    reads: list[str] = []
    original = _npz.read
    monkeypatch.setattr(_npz, "read", lambda *a: reads.append(a[1].key) or original(*a))
    specs = [InputSpec("[0]", (1 << 20,), "float32"), InputSpec("[1]", (2, 4), "float32")]
    with pytest.raises(jaxport.RunError, match=r"input arr_1 is float32\[2,5\], \[1\] must be"):
        load_inputs(path, specs, "f")
    assert reads == []


def test_npz_members_that_are_not_arrays_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.npz"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("arr_0.npy", b"\x93NUMPY\x01\x00\x10\x00{'descr': 'x'}  \n")
        z.writestr("notes.txt", b"hello")
    with pytest.raises(jaxport.RunError, match=r"'arr_0\.npy' is not a \.npy array"):
        load_inputs(path, SPEC, "f")
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("notes.txt", b"hello")
    with pytest.raises(jaxport.RunError, match=r"'notes\.txt' is not an array"):
        load_inputs(path, SPEC, "f")
    buf = io.BytesIO()
    np.save(buf, np.array([{}], dtype=object), allow_pickle=True)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("arr_0.npy", buf.getvalue())
    with pytest.raises(jaxport.RunError, match="allow_pickle=False"):
        load_inputs(path, SPEC, "f")


@pytest.fixture(scope="module")
def model() -> jaxport.Model:
    params = {"w": np.ones((4, 3), np.float32)}
    return jaxport.Model(
        params,
        {"f": lambda p, x, y: x @ p["w"] + y},
        {"f": [jax.ShapeDtypeStruct((2, 4), F32), jax.ShapeDtypeStruct((3,), F32)]},
    )


@pytest.mark.parametrize(
    "args, says",
    [
        (
            (np.ones((2, 5), np.float32), np.ones(3, np.float32)),
            r"argument \[0\] is float32\[2, 5\]",
        ),
        ((np.ones((2, 4), np.int32), np.ones(3, np.float32)), r"argument \[0\] is int32\[2, 4\]"),
        ((np.ones((2, 4), np.float32),), "takes arguments of structure"),
        ((np.ones((2, 4), np.float32), {"y": np.ones(3)}), "takes arguments of structure"),
    ],
)
def test_a_method_called_with_wrong_arguments_is_a_typed_error(
    model: jaxport.Model, args: tuple[object, ...], says: str
) -> None:
    loaded = jaxport.loads_model(model.dumps())
    with pytest.raises(jaxport.RunError, match=says):
        loaded.f(*args)
    out = loaded.f(np.ones((2, 4), np.float64), np.ones(3, np.float32))  # canonicalized to f32
    assert out.shape == (2, 3)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_fifos_and_devices_are_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.jaxport"
    os.mkfifo(fifo)
    code = (
        "import sys, jaxport\n"
        "from pathlib import Path\n"
        "r = jaxport.Registry(f'sqlite:///{sys.argv[2]}/r.db', blobs=Path(sys.argv[2]) / 'b')\n"
        "for p in (sys.argv[1], '/dev/zero'):\n"
        "    for read in (jaxport.load, jaxport.load_model, jaxport.inspect, r.push):\n"
        "        try:\n"
        "            read(p)\n"
        "        except jaxport.JaxportError as e:\n"
        "            print(type(e).__name__, 'not a regular file' in str(e))\n"
    )
    out = subprocess.run(
        [sys.executable, "-P", "-c", code, str(fifo), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = out.stdout.split("\n")[:-1]
    assert len(lines) == 8 and all(line.endswith("True") for line in lines), out
    env = {**os.environ, "JAXPORT_HOME": str(tmp_path / "home")}
    for args in (["push", "/dev/zero", "--name", "z"], ["inspect", str(fifo)]):
        cli = subprocess.run([JAXPORT, *args], capture_output=True, text=True, env=env, timeout=120)
        assert cli.returncode in (1, 2) and "Traceback" not in cli.stderr, cli.stderr


def test_push_takes_a_size_limit(tmp_path: Path) -> None:
    path = tmp_path / "f.jaxport"
    jaxport.save(jax.export.export(jax.jit(jnp.sin))(jax.ShapeDtypeStruct((3,), F32)), path)
    registry = jaxport.Registry(f"sqlite:///{tmp_path}/r.db", blobs=tmp_path / "blobs")
    with pytest.raises(jaxport.InvalidNameError, match="over the limit of 100"):
        registry.push(path, "f", max_size=100)
    assert registry.push(path, "f").version == 1
