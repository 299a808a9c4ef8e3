"""Cross-release check used by scripts/test_jax_versions.sh.

    python scripts/cross_version.py write DIR   # export a few functions, save archives in DIR
    python scripts/cross_version.py read DIR    # load each archive in DIR, run it, compare

The expected outputs are computed with numpy, so a reader needs nothing from the writer.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax
import jax.export  # older jax releases do not import it with jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxport
from jaxport.export import _compat

X = np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4)


def cases():
    (b,) = jax.export.symbolic_shape("b", constraints=["b >= 2"])
    yield (
        "poly",
        jax.export.export(jax.jit(lambda x: jnp.sin(x) * 2))(
            jax.ShapeDtypeStruct((b, 4), jnp.float32)
        ),
        lambda x: np.sin(x) * 2,
    )
    mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("x", "y"))
    sharded = jax.jit(lambda x: x * 3, in_shardings=NamedSharding(mesh, P("x", "y")))
    yield (
        "sharded",
        jax.export.export(sharded)(jax.ShapeDtypeStruct((8, 4), jnp.float32)),
        lambda x: x * 3,
    )


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else -1 for p in version.split("."))


def write(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, exp, _ in cases():
        jaxport.save(exp, out / f"{name}.jaxport", vjp_order=1)


def read(src: Path) -> None:
    expected = {name: fn for name, _, fn in cases()}
    mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("x", "y"))
    for path in sorted(src.glob("*.jaxport")):
        window = jaxport.inspect(path).window
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", jaxport.OutsideJaxWindowWarning)
            try:
                exp = jaxport.load(path)
            except jaxport.NewerFormatError as e:
                # jax promises ~4 weeks of forward compatibility: a module newer than this
                # jaxlib reads fails to deserialize (jax 0.11's StableHLO 1.18.0 under 0.10.2),
                # a typed error naming both versions
                written, newest = e.module_stablehlo, e.installed_stablehlo
                assert _key(written) > _key(newest), (written, newest)
                assert e.installed_jax == jax.__version__, e
                print(f"  refused {path.name}: StableHLO {written} > {newest}, this jaxlib's")
                continue
            except jaxport.UnsupportedFeatureError as e:
                # HloSharding-only shardings (jax < 0.9) under a jax that ignores them (>= 0.11.1)
                assert "HloSharding form only" in str(e) and not _compat.READS_HLO_SHARDINGS, e
                assert _key(window.jax_version) < (0, 9), window
                print(f"  refused {path.name}: written by jax {window.jax_version}: {e}")
                continue
        # Outside jax's 6-month window (jaxport._window) loading warns, and only then.
        warned = any(issubclass(w.category, jaxport.OutsideJaxWindowWarning) for w in caught)
        assert window is not None and warned == (window.within_window is False), (path, window)
        x = jax.device_put(X, exp.in_shardings_jax(mesh)[0]) if exp.nr_devices > 1 else X
        np.testing.assert_allclose(exp.call(x), expected[path.stem](X), rtol=1e-6)
        g = jax.grad(lambda x, exp=exp: exp.call(x).sum())(x)
        assert g.shape == X.shape
        past = f", outside jax's window since {window.window_ends}" if warned else ""
        written = f"written by jax {window.jax_version}"
        print(f"  ok {path.name}: {written}, read by jax {jax.__version__}{past}")


if __name__ == "__main__":
    mode, directory = sys.argv[1], Path(sys.argv[2])
    write(directory) if mode == "write" else read(directory)
