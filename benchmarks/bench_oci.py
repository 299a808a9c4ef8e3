"""OCI benchmark (issue 28): push and pull of a 1 GiB model to a local docker-registry by
jaxport (``Registry.oci_push``, ``jaxport.registry._internal.oci_pull_file``: ``jaxport oci
push`` / ``oci pull -o``) beside oras-py (``oras.provider.Registry.push`` / ``pull``, the
``oras`` package from PyPI: its Python client, not the Go CLI, which is not installable
offline here) moving the same files: the model's layers (its skeleton and one file per
tensor, byte for byte the blobs jaxport pushes). Then fine-tunes pushed to the repository
that holds the first version, the bytes sent counted by the client (request bodies: blobs and
manifests): of the 1 GiB model, the 4 MiB ``head`` and one of the 64 MiB tensors (1/16 of the
model: 6.25 % at least); of a GPT-2-small-shaped model (``--gpt2``), see below.

    python benchmarks/bench_oci.py [--tensors 16] [--mib 64] [--rounds 3] [--gpt2]
        [--fine-tunes-only]

Like with like: Debian's ``docker-registry`` (distribution 2.8) on 127.0.0.1 with htpasswd
auth (both clients log in with Basic), started here and stopped at the end; each round pushes
to fresh repositories (``jN``, ``oN``: every blob is sent), jaxport and oras back to back, who
goes first alternating round by round; each pull writes to a fresh file or folder, deleted
after. jaxport's pull verifies every layer's digest and the assembled archive's (each hashed
on a thread of its own as the bytes arrive) and writes the archive (renamed into place, not
fsynced: a download); oras-py's writes each layer to a file of its own, checking no digest
(nor fsyncing). Ratios are jaxport / oras, per round and of the medians; < 1 is faster than
oras. Both clients run in this process, so each operation's CPU time (user + system, every
thread: ``getrusage``) is measured too: on a shared machine its ratio moves less with the
load than the wall-clock one. Each round's line ends with the 1-minute load average.

``--gpt2``: fine-tunes of GPT-2 small's layout (Hugging Face's ``gpt2``: token and position
embeddings, 12 blocks of 12 tensors, the final LayerNorm: 148 float32 tensors, 124.4 M
parameters, ~498 MB; random values). Version 1 is pushed whole, then each fine-tune to the
same repository: the last block's attention output projection (2 tensors, 0.47 % of the
parameters), every bias and LayerNorm (BitFit: 98 tensors, 0.1 %), the whole last block
(12 tensors, 5.7 %: over 2 % by construction, shown for what is sent beyond the changed
tensors). ``--fine-tunes-only`` skips the 1 GiB model (rounds and its fine-tunes).
"""

from __future__ import annotations

import argparse
import functools
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

#: GPT-2 small (Hugging Face ``gpt2``): vocabulary, context, width, blocks.
GPT2 = {"vocab": 50257, "context": 1024, "width": 768, "blocks": 12}

#: Fine-tunes of the GPT-2 layout: what changed, and which tensors (by dotted path).
GPT2_TUNES: tuple[tuple[str, Callable[[str], bool]], ...] = (
    ("the last block's attention output projection", lambda p: p.startswith("h.11.attn.c_proj")),
    ("every bias and LayerNorm (BitFit)", lambda p: p.endswith(".bias") or ".ln_" in f".{p}"),
    ("the whole last block", lambda p: p.startswith("h.11.")),
)


def _model(tensors: int, mib: int, seed: int = 0, bump: str | None = None):
    """``tensors`` tensors of ``mib`` MiB (``w00``...) and a 4 MiB ``head``; ``bump``: the
    tensor a fine-tune changed (+1.0)."""
    import jax
    import jax.numpy as jnp

    import jaxport

    side = int((mib << 20) // 4 // 1024)
    rng = np.random.default_rng(seed)
    params = {
        f"w{i:02d}": rng.standard_normal((side, 1024), dtype=np.float32) for i in range(tensors)
    }
    params["head"] = rng.standard_normal((1024, 1024), dtype=np.float32)
    if bump is not None:
        params[bump] = params[bump] + 1.0
    x = jax.ShapeDtypeStruct((2, 1024), jnp.float32)
    return jaxport.Model(params, lambda p, v: v @ p["head"].T, [x])


def _gpt2_params(seed: int = 0) -> dict[str, Any]:
    """GPT-2 small's parameter layout (148 float32 tensors, 124.4 M parameters), random."""
    rng = np.random.default_rng(seed)
    d = GPT2["width"]

    def normal(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32)

    def norm() -> dict[str, np.ndarray]:
        return {"weight": normal(d), "bias": normal(d)}

    def dense(n_in: int, n_out: int) -> dict[str, np.ndarray]:  # Conv1D: (in, out)
        return {"weight": normal(n_in, n_out), "bias": normal(n_out)}

    def block() -> dict[str, Any]:
        return {
            "ln_1": norm(),
            "attn": {"c_attn": dense(d, 3 * d), "c_proj": dense(d, d)},
            "ln_2": norm(),
            "mlp": {"c_fc": dense(d, 4 * d), "c_proj": dense(4 * d, d)},
        }

    return {
        "wte": normal(GPT2["vocab"], d),
        "wpe": normal(GPT2["context"], d),
        "h": {str(i): block() for i in range(GPT2["blocks"])},
        "ln_f": norm(),
    }


def _leaves(tree: dict[str, Any], path: str = "") -> Iterator[tuple[str, np.ndarray]]:
    """``(dotted path, array)`` of every tensor."""
    for key, value in tree.items():
        where = f"{path}.{key}" if path else key
        if isinstance(value, dict):
            yield from _leaves(value, where)
        else:
            yield where, value


def _tuned(
    tree: dict[str, Any], changed: Callable[[str], bool], delta: float, path: str = ""
) -> dict[str, Any]:
    """``tree`` with every tensor whose path ``changed`` picks moved by ``delta`` (the others
    shared; each fine-tune its own delta, so none shares a changed tensor with another)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        where = f"{path}.{key}" if path else key
        if isinstance(value, dict):
            out[key] = _tuned(value, changed, delta, where)
        else:
            out[key] = value + np.float32(delta) if changed(where) else value
    return out


def _gpt2_model(params: dict[str, Any]):
    import jax
    import jax.numpy as jnp

    import jaxport

    x = jax.ShapeDtypeStruct((2, GPT2["width"]), jnp.float32)
    return jaxport.Model(params, lambda p, v: v @ p["wte"].T, [x])


def _gpt2_fine_tunes(reg, host: str) -> None:
    """GPT-2 small's version 1 pushed to ``oci://host/gpt2``, then each of ``GPT2_TUNES``,
    with the bytes sent."""
    params = _gpt2_params()
    leaves = dict(_leaves(params))
    reg.push(_gpt2_model(params), "gpt2")
    size = len(reg.pull_bytes("gpt2:1"))
    count = sum(a.size for a in leaves.values())
    print(f"GPT-2 small layout: {len(leaves)} tensors, {count / 1e6:.1f} M parameters, "
          f"archive {size / 1e6:.1f} MB")  # fmt: skip
    url = f"oci://{host}/gpt2"
    reg.oci_push("gpt2:1", url)
    for version, (what, changed) in enumerate(GPT2_TUNES, start=2):
        picked = [a for p, a in leaves.items() if changed(p)]
        reg.push(_gpt2_model(_tuned(params, changed, 0.01 * version)), "gpt2")
        label = f"{what}: {len(picked)} tensors"
        print(_fine_tune(reg, f"gpt2:{version}", url, label, sum(a.nbytes for a in picked), size))


def _layer_files(host: str, repo: str, out: Path) -> list[str]:
    """The layers of ``repo:v1``'s one variant, written to ``out`` (names: their digests)."""
    import json

    from jaxport.registry._oci_client import OciRepository

    out.mkdir()
    files = []
    with OciRepository(f"oci://{host}/{repo}") as r:
        index = json.loads(r.fetch_manifest("v1")[1])
        manifest = json.loads(r.fetch_manifest(index["manifests"][0]["digest"])[1])
        for layer in manifest["layers"]:
            path = out / layer["digest"][7:19]
            with path.open("wb") as f:
                for chunk in r.fetch_blob(layer["digest"], layer["size"]):
                    f.write(chunk)
            files.append(str(path))
    return files


def _cpu() -> float:
    """This process's CPU seconds so far (user + system, every thread)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _timed(fn) -> tuple[float, float]:
    """Wall-clock and CPU seconds of ``fn()``."""
    start, cpu = time.perf_counter(), _cpu()
    fn()
    return time.perf_counter() - start, _cpu() - cpu


def _ratio(times: dict[str, list[float]], op: str, i: int = -1) -> float:
    return times[f"jaxport {op}"][i] / times[f"oras {op}"][i]


def _round_line(times: dict[str, list[float]], cpu: dict[str, list[float]]) -> str:
    line = ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items())
    ratios = ", ".join(
        f"{op} {_ratio(times, op):.2f}x (CPU {_ratio(cpu, op):.2f}x)" for op in ("push", "pull")
    )
    return f"{line}; ratios {ratios}; load {os.getloadavg()[0]:.1f}"


def _summary(op: str, times: dict[str, list[float]], cpu: dict[str, list[float]], size: int) -> str:
    mine, theirs = times[f"jaxport {op}"], times[f"oras {op}"]
    a, b = statistics.median(mine), statistics.median(theirs)
    ratios = [_ratio(times, op, i) for i in range(len(mine))]
    cpu_ratio = statistics.median(cpu[f"jaxport {op}"]) / statistics.median(cpu[f"oras {op}"])
    return (
        f"{op}: jaxport median {a:.2f} s ({size / a / 2**20:.0f} MiB/s), oras {b:.2f} s "
        f"({size / b / 2**20:.0f} MiB/s); ratio of medians {a / b:.2f}x "
        f"(per round {min(ratios):.2f}-{max(ratios):.2f}x); CPU time, medians {cpu_ratio:.2f}x"
    )


def _fine_tune(reg, reference: str, url: str, what: str, changed: int, size: int) -> str:
    """Pushes ``reference`` to ``url`` (which holds the version it was tuned from) and says
    how many bytes went (request bodies, counted by the client) beside the ``changed`` bytes
    of the tensors that differ."""
    from jaxport.registry._oci_client import OciRepository
    from jaxport.registry._oci_mapping import push_version
    from jaxport.registry._oci_report import CopyReport

    report = CopyReport()
    with OciRepository(url) as repo:
        push_version(reg, reference, repo, report)
        sent = repo.bytes_sent
    return (
        f"fine-tune {reference} ({what}, {changed} bytes = {100 * changed / size:.2f} %): "
        f"{sent} bytes sent = {100 * sent / size:.2f} % of the archive ({report.blobs} blobs, "
        f"{report.blobs_present} present, {report.manifests} manifests; beyond the changed "
        f"tensors {sent - changed} bytes)"
    )


def _rounds(reg, served, tmp: Path, rounds: int, size: int) -> None:
    """Push and pull of ``big:1``, jaxport and oras-py interleaved, ``rounds`` times."""
    import oras.provider

    from jaxport.registry._internal import oci_pull_file

    reg.oci_push("big:1", f"oci://{served.host}/warm")  # warm-up, and the files for oras
    files = _layer_files(served.host, "warm", tmp / "files")
    client = oras.provider.Registry(hostname=served.host, insecure=True, auth_backend="basic")
    client.login(username=served.user, password=served.password)

    def jaxport_push(r: int) -> None:
        reg.oci_push("big:1", f"oci://{served.host}/j{r}")

    def oras_push(r: int) -> None:
        client.push(
            target=f"{served.host}/o{r}:v1", files=files, disable_path_validation=True, quiet=True
        )

    def jaxport_pull(r: int) -> None:
        out = tmp / f"pull-{r}.jaxport"
        oci_pull_file(f"oci://{served.host}/j{r}:v1", out, platform=None)
        out.unlink()

    def oras_pull(r: int) -> None:
        out = tmp / f"oras-pull-{r}"
        client.pull(target=f"{served.host}/o{r}:v1", outdir=str(out))
        shutil.rmtree(out)

    keys = ("jaxport push", "oras push", "jaxport pull", "oras pull")
    times: dict[str, list[float]] = {k: [] for k in keys}
    cpu: dict[str, list[float]] = {k: [] for k in keys}
    for r in range(rounds):
        pairs = [("push", jaxport_push, oras_push), ("pull", jaxport_pull, oras_pull)]
        for op, mine, theirs in pairs:
            order = [("jaxport", mine), ("oras", theirs)]
            if r % 2:
                order.reverse()
            for who, fn in order:
                wall, used = _timed(functools.partial(fn, r))
                times[f"{who} {op}"].append(wall)
                cpu[f"{who} {op}"].append(used)
        print(f"round {r + 1}: " + _round_line(times, cpu), flush=True)
    for op in ("push", "pull"):
        print(_summary(op, times, cpu, size))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tensors", type=int, default=16)
    parser.add_argument("--mib", type=int, default=64, help="MiB per tensor")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gpt2", action="store_true", help="fine-tunes of GPT-2 small's layout")
    parser.add_argument("--fine-tunes-only", action="store_true", help="no 1 GiB model")
    args = parser.parse_args()

    from _docker_registry import available, docker_registry

    import jaxport

    if not available():
        sys.exit("docker-registry is not installed (apt-get install docker-registry): not run")
    with tempfile.TemporaryDirectory(prefix="bench-oci-") as tmp_name:
        tmp = Path(tmp_name)
        with docker_registry(tmp / "registry") as served:
            os.environ["JAXPORT_OCI_USERNAME"], os.environ["JAXPORT_OCI_PASSWORD"] = (
                served.user,
                served.password,
            )
            reg = jaxport.Registry(f"sqlite:///{tmp / 'reg.db'}", blobs=tmp / "blobs")
            if not args.fine_tunes_only:
                reg.push(_model(args.tensors, args.mib), "big")
                size = len(reg.pull_bytes("big:1"))
                print(f"model: {args.tensors} tensors x {args.mib} MiB, archive "
                      f"{size / 2**30:.3f} GiB", flush=True)  # fmt: skip
                _rounds(reg, served, tmp, args.rounds, size)
                for version, bump in ((2, "head"), (3, "w03")):  # one tensor changed
                    reg.push(_model(args.tensors, args.mib, bump=bump), "big")
                    changed = reg.pull_model(f"big:{version}").params[bump].nbytes
                    url = f"oci://{served.host}/warm"
                    print(_fine_tune(reg, f"big:{version}", url, bump, changed, size))
            if args.gpt2 or args.fine_tunes_only:
                _gpt2_fine_tunes(reg, served.host)
            reg.close()


if __name__ == "__main__":
    main()
