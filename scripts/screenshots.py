"""The README's screenshots of the registry server's pages (``docs/screenshots/*.png``).

    python scripts/screenshots.py                 # -> docs/screenshots/{index,name,...}.png
    python scripts/screenshots.py --out /tmp/shots

A demo registry in a temporary directory (two versions of a function with a description, a
model whose second version changes its parameters, a scorer; static and full audits with the
running jax; a token) is served in this process (``scripts/screenshot_pages.py``'s
``serving``: uvicorn in a thread), and Playwright drives Debian's Chromium
(``/usr/bin/chromium``) signed in as that token, at 1280x800 CSS pixels: each PNG is the
page's first screen (``PAGES``). It prints each file's size; each should stay under 200 KB.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from screenshot_pages import CHROMIUM, serving  # noqa: E402

#: The screenshots: file stem, path.
PAGES = [
    ("index", "/"),
    ("name", "/names/vision-encoder"),
    ("version", "/names/vision-encoder/2"),
    ("compare", "/names/tiny-lm/compare?a=1&b=2"),
    ("search", "/search?q=owner%3Dvision-team+platform%3Atpu"),
    ("events", "/events"),
]
WIDTH, HEIGHT = 1280, 800
DESCRIPTION_1 = """# Vision encoder

Turns a batch of image features into **16-dim embeddings** for the search index.

- trained on the *catalog-2025* crop set
- owner: vision team (`#vision-infra`)
"""
DESCRIPTION_2 = """# Vision encoder

Turns a batch of image features into **16-dim embeddings** for the search index. Version 2
adds CUDA and TPU variants; outputs match version 1 to 1e-6 on CPU.

- input `float32[8, 64]`, output `float32[8, 16]`
- owner: vision team (`#vision-infra`)

Evaluation: [recall@10 dashboard](https://example.com/dash/vision) · retrain with
`make encoder` in the models repo.
"""


def demo_registry(where: Path) -> tuple[str, Path, str]:
    """Fills a new registry in ``where``; returns its URL, blob directory and a read token."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import jaxport
    from jaxport.registry import DESCRIPTION_KEY

    w = jnp.asarray(np.random.default_rng(0).standard_normal((64, 16)), jnp.float32)

    def exp(fun: Any, platforms: tuple[str, ...] = ("cpu",)) -> Any:
        spec = jax.ShapeDtypeStruct((8, 64), jnp.float32)
        return jax.export.export(jax.jit(fun), platforms=platforms)(spec)

    def encode(x: Any) -> Any:
        return jnp.tanh(x @ w)

    def model(scale: float, extra: bool) -> jaxport.Model:
        params = {"w": scale * np.eye(8, dtype=np.float32), "b": np.zeros(8, np.float32)}
        if extra:
            params["gate"] = np.ones(8, np.float32)
        x = jax.ShapeDtypeStruct((2, 8), jnp.float32)
        return jaxport.Model(params, {"apply": lambda p, x: x @ p["w"] + p["b"]}, {"apply": [x]})

    url, blobs = f"sqlite:///{where / 'registry.db'}", where / "blobs"
    with jaxport.Registry(url, blobs=blobs) as reg:
        meta = {"owner": "vision-team", "dataset": "catalog-2025"}
        reg.push(exp(encode), "vision-encoder", aliases=["prod"],
                 metadata={**meta, DESCRIPTION_KEY: DESCRIPTION_1})  # fmt: skip
        reg.push(
            [exp(encode), exp(encode, ("cuda",)), exp(encode, ("tpu",))], "vision-encoder",
            aliases=["canary"], metadata={**meta, DESCRIPTION_KEY: DESCRIPTION_2},
        )  # fmt: skip
        reg.alias("vision-encoder", "prod", 2)
        reg.push(exp(lambda x: jnp.sum(x, axis=1)), "scorer", metadata={"owner": "ranking"})
        reg.push(model(1.0, extra=False), "tiny-lm", metadata={"owner": "lm-team"})
        reg.push(model(0.5, extra=True), "tiny-lm", metadata={"owner": "lm-team"})
        reg.audit(level="static")
        reg.audit()
        token = reg.tokens.create("alice", "read").secret
    return url, blobs, token


def shoot(base: str, token: str, out: Path) -> list[Path]:
    """Saves each of ``PAGES`` as ``out/STEM.png``, signed in with ``token``."""
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    saved = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM)
        context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})
        context.add_cookies([{"name": "jaxport_token", "value": token, "url": base}])
        page = context.new_page()
        for stem, path in PAGES:
            page.goto(f"{base}{path}")
            target = out / f"{stem}.png"
            page.screenshot(path=str(target))
            saved.append(target)
        browser.close()
    return saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="jaxport-shots-") as tmp:
        url, blobs, token = demo_registry(Path(tmp))
        with serving(url, blobs) as base:
            for path in shoot(base, token, args.out):
                print(f"{path}: {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
