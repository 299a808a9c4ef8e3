"""OCI benchmark (issue 28): push and pull of a 1 GiB model to a local docker-registry by
jaxport (``Registry.oci_push``, ``jaxport.registry._internal.oci_pull_file``: ``jaxport oci
push`` / ``oci pull -o``) beside oras-py (``oras.provider.Registry.push`` / ``pull``, the
``oras`` package from PyPI: its Python client, not the Go CLI, which is not installable
offline here) moving the same files: the model's layers (its skeleton and one file per
tensor, byte for byte the blobs jaxport pushes). Then two fine-tunes, each pushed to the
repository that holds the first version: the 4 MiB ``head`` changed, and one of the 64 MiB
tensors changed (1/16 of the model: 6.25 % at least); the bytes sent, counted by the client
(request bodies: blobs and manifests).

    python benchmarks/bench_oci.py [--tensors 16] [--mib 64] [--rounds 3]

Like with like: Debian's ``docker-registry`` (distribution 2.8) on 127.0.0.1 with htpasswd
auth (both clients log in with Basic), started here and stopped at the end; each round pushes
to fresh repositories (``jN``, ``oN``: every blob is sent), jaxport and oras back to back, who
goes first alternating round by round; each pull writes to a fresh file or folder, deleted
after. jaxport's pull verifies every layer's digest and the assembled archive's, and writes
the archive; oras-py's writes each layer to a file of its own without checking digests.
Ratios are jaxport / oras, per round and of the medians; < 1 is faster than oras.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


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


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _round_line(times: dict[str, list[float]]) -> str:
    line = ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items())
    ratios = [times[f"jaxport {op}"][-1] / times[f"oras {op}"][-1] for op in ("push", "pull")]
    return f"{line}; ratios push {ratios[0]:.2f}x, pull {ratios[1]:.2f}x"


def _summary(op: str, times: dict[str, list[float]], size: int) -> str:
    mine, theirs = times[f"jaxport {op}"], times[f"oras {op}"]
    a, b = statistics.median(mine), statistics.median(theirs)
    ratios = [x / y for x, y in zip(mine, theirs, strict=True)]
    return (
        f"{op}: jaxport median {a:.2f} s ({size / a / 2**20:.0f} MiB/s), oras {b:.2f} s "
        f"({size / b / 2**20:.0f} MiB/s); ratio of medians {a / b:.2f}x "
        f"(per round {min(ratios):.2f}-{max(ratios):.2f}x)"
    )


def _fine_tune(reg, reference: str, url: str, bump: str, size: int) -> str:
    """Pushes ``reference`` to ``url`` (which holds the version it was tuned from) and says
    how many bytes went (request bodies, counted by the client)."""
    from jaxport.registry._oci_client import OciRepository
    from jaxport.registry._oci_mapping import push_version
    from jaxport.registry._oci_report import CopyReport

    report = CopyReport()
    with OciRepository(url) as repo:
        push_version(reg, reference, repo, report)
        sent = repo.bytes_sent
    changed = reg.pull_model(reference).params[bump].nbytes
    return (
        f"fine-tune {reference} ({bump} changed, {changed} bytes): {sent} bytes sent = "
        f"{100 * sent / size:.2f} % of the archive ({report.blobs} blobs, "
        f"{report.blobs_present} present, {report.manifests} manifests; beyond the tensor "
        f"itself {sent - changed} bytes)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tensors", type=int, default=16)
    parser.add_argument("--mib", type=int, default=64, help="MiB per tensor")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import oras.provider
    from _docker_registry import available, docker_registry

    import jaxport
    from jaxport.registry._internal import oci_pull_file

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
            reg.push(_model(args.tensors, args.mib), "big")
            size = sum(len(reg.pull_bytes("big:1")) for _ in [0])
            print(f"model: {args.tensors} tensors x {args.mib} MiB, archive {size / 2**30:.3f} GiB")
            reg.oci_push("big:1", f"oci://{served.host}/warm")  # warm-up, and the files for oras
            files = _layer_files(served.host, "warm", tmp / "files")
            client = oras.provider.Registry(
                hostname=served.host, insecure=True, auth_backend="basic"
            )
            client.login(username=served.user, password=served.password)

            def jaxport_push(r: int) -> None:
                reg.oci_push("big:1", f"oci://{served.host}/j{r}")

            def oras_push(r: int) -> None:
                client.push(
                    target=f"{served.host}/o{r}:v1",
                    files=files,
                    disable_path_validation=True,
                    quiet=True,
                )

            def jaxport_pull(r: int) -> None:
                out = tmp / f"pull-{r}.jaxport"
                oci_pull_file(f"oci://{served.host}/j{r}:v1", out, platform=None)
                out.unlink()

            def oras_pull(r: int) -> None:
                out = tmp / f"oras-pull-{r}"
                client.pull(target=f"{served.host}/o{r}:v1", outdir=str(out))
                shutil.rmtree(out)

            times: dict[str, list[float]] = {
                k: [] for k in ("jaxport push", "oras push", "jaxport pull", "oras pull")
            }
            for r in range(args.rounds):
                pairs = [("push", jaxport_push, oras_push), ("pull", jaxport_pull, oras_pull)]
                for op, mine, theirs in pairs:
                    order = [("jaxport", mine), ("oras", theirs)]
                    if r % 2:
                        order.reverse()
                    for who, fn in order:
                        times[f"{who} {op}"].append(_timed(functools.partial(fn, r)))
                print(f"round {r + 1}: " + _round_line(times))
            for op in ("push", "pull"):
                print(_summary(op, times, size))

            for version, bump in ((2, "head"), (3, "w03")):  # fine-tunes: one tensor changed
                reg.push(_model(args.tensors, args.mib, bump=bump), "big")
                print(_fine_tune(reg, f"big:{version}", f"oci://{served.host}/j0", bump, size))
            reg.close()


if __name__ == "__main__":
    main()
