"""A screenshot of the registry server's audit matrix page (``docs/matrix.png`` in the README).

    python scripts/screenshot_pages.py                       # a demo registry -> docs/matrix.png
    python scripts/screenshot_pages.py --registry URL --blobs DIR --out matrix.png
    python scripts/screenshot_pages.py --jax 0.7.0 --jax 0.8.0   # measure older releases too

The demo registry (in a temporary directory) holds three small functions and a model, pushed
and audited here with the running jax (a static audit and a full one: CPU variants compile and
run, TPU and CUDA variants are ``not-run``, a version whose golden example is wrong on purpose is
a ``mismatch``). Each ``--jax RELEASE`` adds a static audit by that release
(``Registry.audit(jax=...)``: an environment made once, which needs the package index). Without
``--jax``, two older releases' columns are filled with hand-written findings whose reason says
they are illustrations, not measurements, so that every colour of the legend shows.

The app runs in this process (uvicorn in a thread, reads open); Playwright drives Debian's
Chromium (``/usr/bin/chromium``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import jaxport

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
#: Older releases the demo illustrates without ``--jax``: (release, status per row).
ILLUSTRATED = {
    "0.7.0": {"encoder:1": "ok", "encoder:2": "incompatible", "scorer:1": "crash"},
    "0.8.0": {"encoder:1": "ok", "encoder:2": "ok", "scorer:1": "ok", "tiny-lm:1": "ok"},
}


def demo_registry(where: Path, releases: list[str]) -> tuple[str, Path]:
    """Fills a new registry in ``where``; returns its URL and blob directory."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import jaxport

    def exp(fun: Any, platforms: tuple[str, ...] = ("cpu",)) -> Any:
        spec = jax.ShapeDtypeStruct((8,), jnp.float32)
        return jax.export.export(jax.jit(fun), platforms=platforms)(spec)

    url, blobs = f"sqlite:///{where / 'registry.db'}", where / "blobs"
    reg = jaxport.Registry(url, blobs=blobs)
    reg.push(exp(jnp.sin), "encoder", aliases=["prod"])
    reg.push([exp(jnp.cos), exp(jnp.cos, ("cuda",)), exp(jnp.cos, ("tpu",))], "encoder")
    reg.alias("encoder", "canary", 2)
    reg.push(exp(jnp.tanh), "scorer", aliases=["prod"])
    x = np.linspace(-1, 1, 8).astype(np.float32)
    off = jaxport.Example((x,), outputs=np.tanh(2 * x) * 1.01)  # a golden example that drifted
    reg.push(exp(lambda x: jnp.tanh(2 * x)), "scorer", examples=[off])
    x2 = jax.ShapeDtypeStruct((2, 8), jnp.float32)
    params = {"w": np.eye(8, dtype=np.float32), "b": np.zeros(8, np.float32)}
    model = jaxport.Model(params, {"apply": lambda p, x: x @ p["w"] + p["b"]}, {"apply": [x2]})
    reg.push(model, "tiny-lm")
    reg.audit(level="static")
    reg.audit()
    for release in releases:
        reg.audit(jax=release, level="static")
    if not releases:
        _illustrate(url, reg)
    reg.close()
    return url, blobs


def _illustrate(url: str, reg: jaxport.Registry) -> None:
    """Writes the hand-made findings of ``ILLUSTRATED`` (reason: an illustration)."""
    import sqlalchemy as sa

    from jaxport.registry._models import AuditRow

    engine = sa.create_engine(url)
    with engine.begin() as conn:
        for release, statuses in ILLUSTRATED.items():
            for ref, status in statuses.items():
                digest = reg.get(ref).digests[0]
                conn.execute(
                    sa.insert(AuditRow),
                    {"digest": digest, "jax_version": release, "jaxlib_version": release,
                     "platform": "cpu", "status": status, "details_json": "{}",
                     "reason": "an illustration (scripts/screenshot_pages.py), not measured",
                     "seconds": 0.0, "created_at": 1.0, "level": "static"},
                )  # fmt: skip
    engine.dispose()


@contextlib.contextmanager
def serving(url: str, blobs: Path) -> Iterator[str]:
    """The app over the registry, in a thread; yields its base URL."""
    import uvicorn

    import jaxport
    from jaxport.server import create_app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    reg = jaxport.Registry(url, blobs=blobs)
    config = uvicorn.Config(
        create_app(reg, open_read=True), host="127.0.0.1", port=port, log_level="warning"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise SystemExit("the server did not start in 20 s")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        reg.close()


def screenshot(base: str, path: str, out: Path, width: int) -> None:
    """Saves ``base + path`` as a PNG, the page's whole height, ``width`` CSS pixels wide."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM)
        page = browser.new_page(viewport={"width": width, "height": 400})
        page.goto(f"{base}{path}")
        out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out), full_page=True)
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--registry", help="a registry's database URL (default: a demo one)")
    parser.add_argument("--blobs", help="its blob store (with --registry)")
    parser.add_argument("--jax", action="append", default=[], help="also audit with RELEASE")
    parser.add_argument("--page", default="/matrix", help="the page (default: /matrix)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "matrix.png")
    parser.add_argument("--width", type=int, default=1000, help="CSS pixels (default 1000)")
    args = parser.parse_args()
    if bool(args.registry) != bool(args.blobs):
        parser.error("give --registry and --blobs together")
    with tempfile.TemporaryDirectory(prefix="jaxport-pages-") as tmp:
        if args.registry:
            url, blobs = args.registry, Path(args.blobs)
        else:
            url, blobs = demo_registry(Path(tmp), args.jax)
        with serving(url, blobs) as base:
            screenshot(base, args.page, args.out, args.width)
    print(f"{args.out}: {args.out.stat().st_size} bytes")


if __name__ == "__main__":
    main()
