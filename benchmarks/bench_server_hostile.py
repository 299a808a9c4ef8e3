"""A refused request's latency while a hostile client holds the server (issue 24's acceptance).

    python benchmarks/bench_server_hostile.py [--connections 300] [--mb 100] [--n 200]

One ``jaxport serve`` process (uvicorn, 1 worker, SQLite, 127.0.0.1 only). A hostile client,
in a process of its own, holds ``--connections`` connections from one event loop (a third
idle, a third sending a request head a byte a second, a third a ``/login`` body a byte a
second: each reopened when the server cuts it off; 300 threads instead cost the attacker's
process more CPU than the server spends on them, on the same 2 cores) and streams a ``--mb``
MiB part upload with a valid write token, again and again, as fast as the server reads it.
Meanwhile one client sends ``--n`` requests the server refuses or answers with an error, on
one kept-alive connection:

- error: ``GET /api/v1/ref?reference=absent:1`` with a read token: 404;
- refusal: ``POST /api/v1/versions`` with no token: 401, before its body is read.

Prints p50 and p99 of each, idle and under the hostile load, and their ratio (the machine is
shared: a ratio measured in one run holds better than a time). Target (issue 24): each under
50 ms under the load. Not a test: nothing here is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).parent))
from _machine import load_average
from _server import admin_token, serving


def percentiles(send, n: int) -> tuple[float, float]:
    """p50 and p99 of ``n`` calls of ``send``, in milliseconds."""
    times = []
    for _ in range(n):
        t = time.perf_counter()
        send()
        times.append(time.perf_counter() - t)
    times.sort()
    return statistics.median(times) * 1e3, times[int(0.99 * (n - 1))] * 1e3


async def _slow(port: int, start: bytes, stop: threading.Event) -> None:
    """One connection sending ``start`` then a byte a second, reopened when cut off."""
    writer = None
    while not stop.is_set():
        try:
            if writer is None:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(start)
            elif start:
                writer.write(b"a")
            await writer.drain()
            if writer.is_closing() or writer.transport.get_extra_info("socket") is None:
                raise ConnectionError
        except OSError:
            writer = None
            continue
        await asyncio.sleep(1.0)
    if writer is not None:
        writer.close()


def _connections(port: int, heads: list[bytes], n: int, stop: threading.Event) -> None:
    """``n`` slow connections in one event loop (an attacker's cost is not the server's)."""

    async def all_of_them() -> None:
        await asyncio.gather(*(_slow(port, heads[i % len(heads)], stop) for i in range(n)))

    asyncio.run(all_of_them())


def _upload(url: str, token: str, mb: int, stop: threading.Event, sent: list[int]) -> None:
    data = os.urandom(1 << 20) * mb  # 100 MiB, a few distinct MiB repeated
    digest = hashlib.sha256(data).hexdigest()
    headers = {"Authorization": f"Bearer {token}"}

    def body():
        for i in range(0, len(data), 1 << 16):
            yield data[i : i + (1 << 16)]

    with httpx.Client(timeout=600) as client:
        while not stop.is_set():
            client.put(f"{url}/api/v1/blobs/{digest}", content=body(), headers=headers)
            sent.append(len(data))


def hostile(url: str, token: str, connections: int, mb: int, ready, stop_event) -> None:
    """The hostile client (a process): see the module's doc."""
    port = int(url.rsplit(":", 1)[1])
    heads = [
        b"",  # idle
        b"GET /api/v1/names HTTP/1.1\r\nHost: x\r\nX-Slow: ",
        b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded"
        b"\r\nContent-Length: 100000\r\n\r\ntoken=",
    ]
    stop = threading.Event()
    sent: list[int] = []
    threads = [
        threading.Thread(target=_connections, args=(port, heads, connections, stop)),
        threading.Thread(target=_upload, args=(url, token, mb, stop, sent)),
    ]
    for t in threads:
        t.start()
    time.sleep(2.0)
    ready.set()
    stop_event.wait()
    stop.set()
    print(f"hostile client: {len(sent)} uploads of {mb} MiB completed while measured", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--connections", type=int, default=300)
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--n", type=int, default=200)
    args = parser.parse_args()
    print(load_average())
    with tempfile.TemporaryDirectory() as tmp:
        db, blobs = f"sqlite:///{tmp}/reg.db", f"{tmp}/blobs"
        extra = ("--max-upload", str((args.mb + 1) << 20))
        with serving(db, blobs, Path(tmp) / "serve.log", extra=extra) as server:
            writer = admin_token(db, blobs, "writer", "write")
            reader = admin_token(db, blobs, "reader", "read")
            with httpx.Client(base_url=f"{server.url}/api/v1", timeout=60) as client:

                def error() -> None:
                    r = client.get("/ref", params={"reference": "absent:1"},
                                   headers={"Authorization": f"Bearer {reader}"})  # fmt: skip
                    assert r.status_code == 404, r.status_code

                def refusal() -> None:
                    r = client.post("/versions", content=b"{}",
                                    headers={"Content-Type": "application/json"})  # fmt: skip
                    assert r.status_code == 401, r.status_code

                idle = {name: percentiles(f, args.n) for name, f in
                        (("error", error), ("refusal", refusal))}  # fmt: skip
                ready, stop = multiprocessing.Event(), multiprocessing.Event()
                attacker = multiprocessing.Process(
                    target=hostile, args=(server.url, writer, args.connections, args.mb,
                                          ready, stop),
                )  # fmt: skip
                attacker.start()
                ready.wait(60)
                loaded = {name: percentiles(f, args.n) for name, f in
                          (("error", error), ("refusal", refusal))}  # fmt: skip
                stop.set()
                attacker.join(120)
            print(f"{args.connections} hostile connections, a {args.mb} MiB upload streamed; "
                  f"{args.n} requests each, one kept-alive connection")  # fmt: skip
            print(f"{'':<10} {'idle p50':>9} {'idle p99':>9} {'load p50':>9} {'load p99':>9} "
                  f"{'p99 ratio':>9}")  # fmt: skip
            for name in idle:
                (i50, i99), (l50, l99) = idle[name], loaded[name]
                print(f"{name:<10} {i50:8.2f}ms {i99:8.2f}ms {l50:8.2f}ms {l99:8.2f}ms "
                      f"{l99 / i99:8.1f}x")  # fmt: skip
            print("target: p99 under load < 50 ms")
            print(load_average())


if __name__ == "__main__":
    main()
