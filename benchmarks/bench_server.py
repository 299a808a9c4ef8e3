"""The registry server against the direct registry, in one run on this machine.

    python benchmarks/bench_server.py [--mb 100] [--users 8 16 32]

- pull: a 100 MB archive (a function with 100 MB of f32 constants) through ``jaxport serve``
  (``Registry("http://...").pull_bytes``: streamed, verified on both sides) against the direct
  blob-store read (``Registry(db).pull_bytes``: read and verified), best of 5 each;
- fine-tune push: a model of 100 tensors (1 MiB each) pushed, then again with one tensor
  changed: bytes sent by the second push over the model's bytes;
- resolve: p50 and p99 of ``Registry.resolve`` through HTTP (one client, 200 calls) and direct;
- load: requests per second one server process (uvicorn, 1 worker) answers to ``/resolve``
  under locust (``FastHttpUser``, N users, 15 s each, 127.0.0.1 only), with p50 and p99: the
  highest rate at p99 < 50 ms is the figure.

Targets (issue 17): pull >= 0.8x the direct read; the fine-tune push < 2 % of the model's
bytes; resolve p50 < 5 ms through HTTP. Prints ratios against the direct registry measured in
the same run (the machine is shared: a ratio holds, a time does not).
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import jaxport

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from _server import admin_token, serving

HERE = Path(__file__).parent


def best(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def percentiles(fn, n: int = 200) -> tuple[float, float]:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    times.sort()
    return statistics.median(times) * 1e3, times[int(0.99 * (n - 1))] * 1e3


def big_archive(mb: int) -> bytes:
    w = np.random.default_rng(0).standard_normal(mb * (1 << 20) // 4).astype(np.float32)
    exp = jax.export.export(jax.jit(lambda x: x + jnp.asarray(w)[: x.shape[0]].sum()))(
        jax.ShapeDtypeStruct((4,), jnp.float32)
    )
    return jaxport.dumps(exp)


def fine_tune(remote: jaxport.Registry) -> tuple[int, int]:
    rng = np.random.default_rng(1)
    params = {f"l{i:03d}": rng.standard_normal((512, 512)).astype(np.float32) for i in range(100)}
    spec = {"f": [jax.ShapeDtypeStruct((2, 512), jnp.float32)]}
    model = jaxport.Model(params, {"f": lambda p, x: x @ p["l000"]}, spec)
    sent: list[int] = []
    request = remote._backend._http._client.request

    def counting(method, path, **kw):
        if method == "PUT":
            sent.append(len(kw.get("content", b"")))
        return request(method, path, **kw)

    remote._backend._http._client.request = counting
    remote.push(model, "ft")
    sent.clear()
    remote.push(model.update_params(dict(params, l042=params["l042"] * 1.01)), "ft")
    remote._backend._http._client.request = request
    return sum(sent), sum(t.nbytes for t in params.values())


def load(url: str, token: str, users: int, tmp: Path) -> tuple[float, float, float]:
    prefix = tmp / f"locust{users}"
    subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(HERE / "locust_resolve.py"), "--headless",
         "-u", str(users), "-r", str(users), "-t", "15s", "--host", url, "--csv", str(prefix),
         "--only-summary", "--loglevel", "ERROR"],
        env={**os.environ, "JAXPORT_TOKEN": token}, check=True, capture_output=True,
        timeout=120,
    )  # fmt: skip
    with open(f"{prefix}_stats.csv") as f:
        row = next(r for r in csv.DictReader(f) if r["Name"] == "Aggregated")
    return float(row["Requests/s"]), float(row["50%"]), float(row["99%"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--users", type=int, nargs="*", default=[4, 8, 16, 32])
    args = parser.parse_args()
    print(f"jax {jax.__version__}, {os.cpu_count()} CPUs, load {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        db, blobs = f"sqlite:///{tmp / 'r.db'}", str(tmp / "blobs")
        direct = jaxport.Registry(db, blobs=blobs, upgrade=True)
        data = big_archive(args.mb)
        direct.push(data, "big")
        direct.push(jax.export.export(jax.jit(jnp.sin))(jnp.zeros(3)), "bench")
        token = admin_token(db, blobs)
        with serving(db, blobs, tmp / "serve.log") as s:
            remote = jaxport.Registry(s.url, token=token)
            assert remote.pull_bytes("big") == data
            t_direct = best(lambda: direct.pull_bytes("big"))
            t_remote = best(lambda: remote.pull_bytes("big"))
            size = len(data) / 1e6
            print(f"pull {size:.0f} MB: direct {t_direct:.3f} s ({size / t_direct:.0f} MB/s), "
                  f"server {t_remote:.3f} s ({size / t_remote:.0f} MB/s): "
                  f"{t_direct / t_remote:.2f}x the direct read (target >= 0.8x)")  # fmt: skip
            out = tmp / "pulled.jaxport"
            f_direct = best(lambda: direct.pull_file("big", out))
            f_remote = best(lambda: remote.pull_file("big", out))
            print(f"pull_file {size:.0f} MB: direct {f_direct:.3f} s, server {f_remote:.3f} s: "
                  f"{f_direct / f_remote:.2f}x the direct copy")  # fmt: skip
            sent, total = fine_tune(remote)
            print(f"fine-tune push: {sent:,} of {total:,} bytes sent = {sent / total:.2%} "
                  "(target < 2 %)")  # fmt: skip
            p50, p99 = percentiles(lambda: remote.resolve("bench", platform="cpu"))
            d50, d99 = percentiles(lambda: direct.resolve("bench", platform="cpu"))
            print(f"resolve: HTTP p50 {p50:.2f} ms p99 {p99:.2f} ms; direct p50 {d50:.2f} "
                  f"ms p99 {d99:.2f} ms; HTTP/direct {p50 / d50:.1f}x (target < 5 ms)")  # fmt: skip
            for users in args.users:
                rps, l50, l99 = load(s.url, token, users, tmp)
                ok = "p99 < 50 ms" if l99 < 50 else "p99 >= 50 ms"
                print(f"load, {users:>2} users: {rps:7.1f} req/s, p50 {l50:.0f} ms, "
                      f"p99 {l99:.0f} ms ({ok})")  # fmt: skip
        direct.close()


if __name__ == "__main__":
    main()
