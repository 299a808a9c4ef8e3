"""Model archives and imports whose declared sizes or sharing would cost a reader more than
their bytes: each is read in time and memory linear in its size, or refused with a typed error
before anything is allocated, and the calling process survives (issue 15, item 2)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxport
from jaxport.export import (
    _container,
    _exported,
    _import,
    _info,
    _model_archive,
    _tensors,
    _vetting,
)
from jaxport.schema import fb

F32 = jnp.float32
X = jax.ShapeDtypeStruct((3,), F32)


def _shared_exported_archive(n_methods: int, n_inputs: int) -> bytes:
    """A model whose ``n_methods`` methods all point at one ``Exported`` table (of a function
    of ``n_inputs`` scalars), with one module: built by the real encoders, the method tables
    given the offset of the first Exported encoded."""
    model = jaxport.Model(
        {"w": np.ones(4, np.float32)},
        {"f": lambda p, xs: sum(xs) + p["w"][0]},
        {"f": [[jax.ShapeDtypeStruct((), F32)] * n_inputs]},
    )
    arrays = [model._store.array(i) for i in range(len(model._store))]
    one = _model_archive.ModelContents(model.params_tree, arrays, model.exported, {"f": 0}, {})
    _, chains, refs, module_chunks, module_section = _model_archive._encode_modules(one)
    names = [f"m{i:02d}" for i in range(n_methods)]
    exp = model.exported["f"]
    contents = _model_archive.ModelContents(
        model.params_tree, arrays, dict.fromkeys(names, exp), dict.fromkeys(names, 0), {}
    )
    datas = [bytes(_tensors.tensor_bytes(a)) for a in arrays]
    paths = _model_archive.tensor_paths(model.params_tree)
    infos, sections = [], [module_section]
    payload = bytearray(b"".join(module_chunks))
    for i, (a, d) in enumerate(zip(arrays, datas, strict=True)):
        digest = hashlib.sha256(d).digest()
        infos.append(
            _tensors.TensorInfo(paths[i], a.shape, a.dtype.name, len(d), digest.hex(), i + 1)
        )
        start = -(-len(payload) // 64) * 64
        payload += bytes(start - len(payload)) + d
        sections.append(_container.Section(start, len(d), fb.Compression.none, len(d), digest))
    encode = _model_archive.encode_exported
    first: list[int] = []

    def encode_once(*args: Any) -> int:
        if not first:
            first.append(encode(*args))
        return first[0]

    _model_archive.encode_exported = encode_once  # type: ignore[assignment]
    try:
        header = _model_archive._encode_header(
            contents, names, dict.fromkeys(names, chains["f"]), refs * n_methods, sections, infos
        )
    finally:
        _model_archive.encode_exported = encode
    return _container.encode_preamble(header, 2) + header + bytes(payload)


def _counting(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[int]:
    """Counts the calls of ``owner.name`` (one element per call)."""
    calls: list[int] = []
    original: Callable[..., Any] = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def test_methods_sharing_one_exported_decode_it_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: 64 methods pointing at one Exported table were decoded 64 times by
    ``loads_model`` (a budget of 65 headers allowed it: 1.8 s for an 84 KB archive of 2,000
    inputs, 5.8 s for 2.1 MB) and refused by ``inspect`` (one header's budget). Now every
    reader decodes the shared table, its avals and its module once, and both read it."""
    data = _shared_exported_archive(64, 2000)
    levels = _counting(monkeypatch, _exported, "_decode_level")
    vetted = _counting(monkeypatch, _vetting, "vet_module")
    model = jaxport.loads_model(data)
    assert len(levels) == 1 and len(vetted) == 1
    assert sorted(model.exported) == [f"m{i:02d}" for i in range(64)]
    assert model.m00(*[[np.float32(1)] * 2000]) == model.m63(*[[np.float32(1)] * 2000]) == 2001

    chains = _counting(monkeypatch, _info, "_chain")
    avals = _counting(monkeypatch, _info, "_aval_infos")
    info = jaxport.inspect(data)
    assert len(chains) == 1 and len(avals) == 2  # one method's inputs and outputs
    assert [m.name for m in info.methods] == [f"m{i:02d}" for i in range(64)]
    assert {len(m.in_avals) for m in info.methods} == {2000}
    assert [m.method for m in info.modules] == [f"m{i:02d}" for i in range(64)]


def _safetensors(header: dict[str, Any], data: bytes = b"", declared: int | None = None) -> bytes:
    """A safetensors file: the header's length (or ``declared``), its JSON, the data."""
    text = json.dumps(header).encode()
    size = len(text) if declared is None else declared
    return struct.pack("<Q", size) + text + data


def test_a_deep_or_long_safetensors_key_is_refused_before_any_tensor_is_read(
    tmp_path: Path,
) -> None:
    """Before: a key of 100,000 dots raised ``SystemError`` (jax flattening 100,001 levels)."""
    pytest.importorskip("safetensors")
    one = {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}
    path = tmp_path / "deep.safetensors"
    for key, why in [
        (".".join("a" * 100_001), r"nests 100001 levels deep \(limit 497"),
        (".".join("a" * 498), r"nests 498 levels deep \(limit 497"),
        ("k" * 1025, r"1025 characters \(limit 1024\)"),
    ]:
        path.write_bytes(_safetensors({key: one}, bytes(4)))
        with pytest.raises(jaxport.UnsupportedFeatureError, match=why):
            jaxport.Model.from_safetensors(path, lambda p, x: x, [X])
    path.write_bytes(_safetensors({".".join("a" * 497): one}, bytes(4)))
    model = jaxport.Model.from_safetensors(path, lambda p, x: x, [X])
    assert jaxport.loads_model(model.dumps()).apply(np.ones(3, np.float32)).shape == (3,)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (struct.pack("<Q", 2**40) + b"{}", "declaring a header of 1099511627776 bytes"),
        (struct.pack("<Q", 2**64 - 1) + b"{}", "declaring a header of 18446744073709551615"),
        (b"\x01\x02", "less than its header length's 8"),
        (
            _safetensors(
                {"a": {"dtype": "F32", "shape": [2**40], "data_offsets": [0, 4]}}, b"1234"
            ),
            "invalid shape, data type, or offset",
        ),
        (
            _safetensors({"a": {"dtype": "F32", "shape": [2**62, 4], "data_offsets": [0, 4]}}),
            "overflow",
        ),
        (
            _safetensors({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 2**40]}}, b"1234"),
            "offset",
        ),
        (struct.pack("<Q", 100_000) + b"[" * 100_000, "invalid JSON"),
    ],
    ids=[
        "header-past-file",
        "header-2^64",
        "short",
        "shape-past-data",
        "shape-overflow",
        "offset-past-file",
        "deep-json",
    ],
)
def test_safetensors_sizes_are_checked_against_the_file_before_reading(
    tmp_path: Path, data: bytes, why: str
) -> None:
    """A declared header length, shape or offset past the file is refused before anything of
    that size is read or allocated (the header by jaxport, the tensors by safetensors)."""
    pytest.importorskip("safetensors")
    path = tmp_path / "bad.safetensors"
    path.write_bytes(data)
    with pytest.raises(jaxport.CorruptArchiveError, match=re.escape(why)):
        jaxport.Model.from_safetensors(path, lambda p, x: x, [X])


def test_a_safetensors_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    pytest.importorskip("safetensors")
    fifo = tmp_path / "fifo.safetensors"
    os.mkfifo(fifo)
    with pytest.raises(jaxport.CorruptArchiveError, match="not a regular file"):
        _import.params_from_safetensors(fifo)


def _orbax_checkpoint(directory: Path) -> dict[str, Any]:
    """A real checkpoint of ``{"w": [1, 1, 1]}``; returns its tree metadata (``_METADATA``)."""
    ocp = pytest.importorskip("orbax.checkpoint")
    ocp.PyTreeCheckpointer().save(directory, {"w": np.ones(3, np.float32)})
    metadata: dict[str, Any] = json.loads((directory / "_METADATA").read_text())
    return metadata


def test_a_deep_orbax_key_path_is_refused_before_orbax_walks_it(tmp_path: Path) -> None:
    """Before: a tree metadata entry of 100,000 keys raised ``RecursionError`` (inside Orbax;
    ``SystemError`` through jax's flatten at 5,000)."""
    metadata = _orbax_checkpoint(tmp_path / "ckpt")
    entry = metadata["tree_metadata"]["('w',)"]
    for depth in (100_000, 5_000, 498):
        metadata["tree_metadata"] = {
            "deep": {**entry, "key_metadata": [{"key": "a", "key_type": 2}] * depth}
        }
        (tmp_path / "ckpt" / "_METADATA").write_text(json.dumps(metadata))
        with pytest.raises(jaxport.UnsupportedFeatureError, match=f"nests {depth} levels deep"):
            jaxport.Model.from_orbax(tmp_path / "ckpt", lambda p, x: x, [X])


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (b"[" * 100_000 + b"]" * 100_000, r"JSON nested 100000 levels deep \(limit 500\)"),
        (b'{"a": "' + b"[" * 10_000 + b'", "b": ' + b"[" * 501, "JSON nested 502 levels"),
        (b'{"value_metadata_tree": "' + b"[" * 600 + b'"}', "JSON nested 600 levels"),
        (b"{" * 10, "not JSON"),
    ],
    ids=["nested", "brackets-in-strings-ignored", "rich-tree-string", "truncated"],
)
def test_orbax_metadata_json_is_bounded_before_it_is_parsed(
    tmp_path: Path, text: bytes, why: str
) -> None:
    _orbax_checkpoint(tmp_path / "ckpt")
    (tmp_path / "ckpt" / "_METADATA").write_bytes(text)
    with pytest.raises(jaxport.CorruptArchiveError, match=why):
        jaxport.Model.from_orbax(tmp_path / "ckpt", lambda p, x: x, [X])


_CALL_UNDER_LIMIT = """
import resource, sys
import jax, numpy as np, jaxport
jax.jit(lambda x: x + 1)(np.ones(4, np.float32))  # the runtime, and what jax imports lazily
# 1500 MiB of address space beyond what the imports and the backend hold (that differs between
# jax releases: 0.76 GB under 0.7.0, 1.35 GB under 0.10.2): the 1 GiB of tensors may
# decompress, their copies on the device cannot fit beside them.
with open("/proc/self/status") as status:
    held = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize"))
resource.setrlimit(resource.RLIMIT_AS, (held + 1500 * 2**20, held + 1500 * 2**20))
try:
    # trusted: the module sandbox's workers would inherit the limit (tested in test_sandbox.py)
    model = jaxport.load_model(sys.argv[1], trusted=True)
    model.apply(np.ones(4, np.float32))
except jaxport.JaxportError as e:
    print("typed", type(e).__name__, e)
else:
    print("called")
"""


def test_a_model_declaring_a_gibibyte_of_compressed_tensors_fails_typed_when_called(
    tmp_path: Path,
) -> None:
    """The 1.1 MB model that allocated 2.3 GB when called: 64 zstd tensor sections of 16 MiB,
    each a 19 KB frame (about 860x, within the default ratio bound of 1000x, so the archive is
    valid), 1 GiB of parameters in a 1.3 MB file; a call holds each tensor decompressed and
    its copy on the device (measured: 2.2x the declared bytes at peak). Under an address-space
    limit 1500 MiB above what the process holds after importing jax, the call now fails with
    ``RunError`` (before: jax's raw ``JaxRuntimeError: RESOURCE_EXHAUSTED``), or, where the
    started runtime left less room (jax 0.12), reading a tensor with ``CorruptArchiveError``;
    the process exits normally."""
    zstandard = pytest.importorskip("zstandard")
    from test_model_attacks import _build

    rng = np.random.default_rng(0)
    tensor = np.zeros(16 * 2**20, np.uint8)
    tensor[::4000] = rng.integers(1, 255, tensor[::4000].size)
    frame = zstandard.ZstdCompressor(level=19, write_content_size=True).compress(tensor.tobytes())
    params = {f"t{i:02d}": tensor for i in range(64)}
    model = jaxport.Model(
        params,
        lambda p, x: x + sum(v[:4].astype(F32) for v in p.values()),
        [jax.ShapeDtypeStruct((4,), F32)],
    )
    data = _build(model, payloads=[(frame, fb.Compression.zstd, tensor.nbytes)] * 64, version=3)
    assert len(data) < 1.5 * 2**20
    (tmp_path / "m.jaxport").write_bytes(data)
    child = subprocess.run(
        # Threads with 1 MiB stacks (glibc takes RLIMIT_STACK, 8 MiB, as their default): under the
        # address-space limit, XLA's and LLVM's compile threads otherwise fail to start and abort.
        [
            "sh",
            "-c",
            'ulimit -s 1024 && exec "$0" "$@"',
            sys.executable,
            "-c",
            _CALL_UNDER_LIMIT,
            str(tmp_path / "m.jaxport"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=tmp_path,  # not the checkout's root, whose jaxport/ would shadow the package
    )
    if child.returncode != 0 and "pthread_create" in child.stderr:
        pytest.skip(  # seen under jax 0.7.0 in about half of the runs; never under 0.10.2
            "XLA aborted when it could not start a compile thread under the address-space "
            "limit, before the call allocated: this jax release cannot run the check"
        )
    assert child.returncode == 0, child.stderr[-2000:]
    # Which typed refusal comes first depends on how much address space the started runtime
    # left (jax 0.12 starts bigger): a tensor's decompression refused when read, or the call.
    out = child.stdout
    assert out.startswith(("typed RunError parameter", "typed CorruptArchiveError section")), (
        out + child.stderr[-2000:]
    )
    assert "does not fit in the devices' memory" in out or "more than this process can" in out
