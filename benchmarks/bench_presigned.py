"""Presigned transfers: a model pushed and pulled through ``jaxport serve`` over an S3 store,
against s3fs reading and writing the same blobs straight, in one run on this machine.

    python benchmarks/bench_presigned.py [--mib 1024] [--rounds 2]

The S3 store is moto's server (``tests/_s3_moto.py``: S3's checks of presigned URLs and
checksums), on 127.0.0.1, authenticating; the registry server runs over SQLite and that store.

- bytes through the server process: ``GET /api/v1/transfer`` (every HTTP body byte the server
  received and sent, and the blob bytes it read from and wrote to the store) before and after
  each push and pull, over the model's tensor bytes (target < 1 %);
- push: ``Registry(url).push(model)`` (the archive made and hashed here, the parts PUT to
  presigned URLs, moved by server-side copies, the model committed from its skeleton) against
  ``S3FileSystem.pipe`` of the same parts (target <= 1.1x the direct write);
  where the push's time goes is printed too (the server-side copies, the commit);
- pull: ``Registry(url).pull_bytes`` (the parts read from presigned GETs into one buffer, the
  whole archive's sha256 checked) against ``S3FileSystem.cat`` of the same blobs (target >=
  0.9x the direct read's speed).

The model: ``--mib`` MiB of float32 parameters in 64 MiB tensors. Each round pushes a model with
other values (one element of each tensor changed), so no part is on the store already. Ratios
are of the best round of each, measured in the same run (times move with the load of a shared
machine; ratios hold better).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import httpx
import jax
import jax.numpy as jnp
import numpy as np

import jaxport

TESTS = Path(__file__).parent.parent / "tests"
sys.path.insert(0, str(TESTS))
from _server import admin_token, serving  # noqa: E402

from _s3 import _free_port, _provision  # noqa: E402

SIDE = 4096  # a 4096 x 4096 float32 tensor: 64 MiB


def start_moto(log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["INITIAL_NO_AUTH_ACTION_COUNT"] = "3"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, str(TESTS / "_s3_moto.py"), "-H", "127.0.0.1", "-p", str(port)],
            stdout=out, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    for _ in range(300):
        try:
            with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1):
                return process, endpoint
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"moto did not start: {log.read_text()[-2000:]}")


def model(params: dict[str, np.ndarray]) -> jaxport.Model:
    spec = {"f": [jax.ShapeDtypeStruct((2, SIDE), jnp.float32)]}
    return jaxport.Model(params, {"f": lambda p, x: x @ p["w00"]}, spec)


def moved(url: str, token: str) -> int:
    answer = httpx.get(f"{url}/api/v1/transfer", headers={"Authorization": f"Bearer {token}"})
    return sum(answer.raise_for_status().json().values())


#: Seconds spent in each API request, by method and path (``phases``).
SPENT: dict[str, float] = {}


def phases() -> None:
    """Times each API request of this process (``SPENT``): where a push's time goes."""
    from jaxport.registry import _http

    request = _http.Http.json

    def json_timed(self, method, path, **kw):
        start = time.perf_counter()
        try:
            return request(self, method, path, **kw)
        finally:
            what = f"{method} {path if not path.startswith('/blobs/') else '/blobs/...'}"
            SPENT[what] = SPENT.get(what, 0.0) + time.perf_counter() - start

    _http.Http.json = json_timed


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    import s3fs

    print(f"jax {jax.__version__}, {os.cpu_count()} CPUs, load {os.getloadavg()}")
    phases()
    tensors = max(1, args.mib // 64)
    rng = np.random.default_rng(0)
    params = {f"w{i:02d}": rng.standard_normal((SIDE, SIDE), dtype=np.float32)
              for i in range(tensors)}  # fmt: skip
    payload = sum(a.nbytes for a in params.values())
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        moto, endpoint = start_moto(tmp / "moto.log")
        try:
            key, secret = _provision(endpoint)
            options = {"endpoint_url": endpoint, "key": key, "secret": secret,
                       "client_kwargs": {"region_name": "us-east-1"}}  # fmt: skip
            fs = s3fs.S3FileSystem(**options)
            fs.call_s3("create_bucket", Bucket="jaxport-bench")
            blobs = f"s3://jaxport-bench/{uuid.uuid4().hex}"
            db = f"sqlite:///{tmp / 'r.db'}"
            os.environ["JAXPORT_BLOBS_OPTIONS"] = json.dumps(options)
            token = admin_token(db, blobs)
            env = {"JAXPORT_BLOBS_OPTIONS": json.dumps(options)}
            with serving(db, blobs, tmp / "serve.log", env=env) as server:
                remote = jaxport.Registry(server.url, token=token)
                push_t, write_t, pull_t, read_t = [], [], [], []
                push_bytes = pull_bytes = 0
                for r in range(args.rounds):
                    for a in params.values():
                        a[0, 0] += 1.0  # other values: every part is new to the store
                    m = model(params)
                    direct = {f"jaxport-bench/peer/{r}/{i}": bytes(c)
                              for i, c in enumerate(m.dump_chunks())}  # fmt: skip
                    write_t.append(timed(lambda: fs.pipe(direct)))  # noqa: B023
                    direct.clear()
                    stored = blobs.removeprefix("s3://") + "/sha256"
                    old = set(fs.find(stored)) if r else set()
                    before = moved(server.url, token)
                    SPENT.clear()
                    push_t.append(timed(lambda: remote.push(m, f"big{r}")))  # noqa: B023
                    spent = dict(SPENT)
                    push_bytes = moved(server.url, token) - before
                    variant = remote.get(f"big{r}").variants[0]
                    fs.invalidate_cache()
                    keys = sorted(set(fs.find(stored)) - old)  # this push's blobs
                    read_t.append(timed(lambda: fs.cat(keys)))  # noqa: B023
                    before = moved(server.url, token)
                    pulled: list[bytes] = []
                    pull_t.append(timed(lambda: pulled.append(remote.pull_bytes(f"big{r}"))))  # noqa: B023
                    pull_bytes = moved(server.url, token) - before
                    assert len(pulled[0]) == variant.size_bytes
                    pulled.clear()
                size = payload / 2**20
                print(f"model: {tensors} tensors, {size:.0f} MiB of float32 parameters")
                print(f"bytes through the server process: push {push_bytes:,} "
                      f"({push_bytes / payload:.3%}), pull {pull_bytes:,} "
                      f"({pull_bytes / payload:.3%}) of the payload (target < 1 %)")  # fmt: skip
                copies, commit = spent.get("POST /uploads/complete", 0), spent["POST /versions"]
                print(f"last push: {copies:.2f} s moving the parts from their staging keys "
                      "(server-side copies in the store, summed over the parts: they overlap "
                      f"the uploads of the next ones), {commit:.2f} s committing")  # fmt: skip
                pw, dw = min(push_t), min(write_t)
                print(f"push {pw:.2f} s ({size / pw:.0f} MiB/s), s3fs write {dw:.2f} s "
                      f"({size / dw:.0f} MiB/s): {pw / dw:.2f}x the direct write's time "
                      "(target <= 1.1x)")  # fmt: skip
                pl, dr = min(pull_t), min(read_t)
                print(f"pull {pl:.2f} s ({size / pl:.0f} MiB/s), s3fs read {dr:.2f} s "
                      f"({size / dr:.0f} MiB/s): {dr / pl:.2f}x the direct read's speed "
                      "(target >= 0.9x)")  # fmt: skip
        finally:
            moto.terminate()
            moto.wait(timeout=30)


if __name__ == "__main__":
    main()
