"""Registry benchmark: jaxport against MLflow's Model Registry, in one run, on SQLite.

    python benchmarks/bench_registry.py [--variants 100000] [--repeat 200]
        [--mlflow-python PATH]   # an interpreter with mlflow installed (default: this one)

jaxport: a registry pre-filled with ``--variants`` variants (10 versions per name, platforms
and device counts mixed; rows bulk-inserted, all pointing at one real archive), then p50 of
``push`` of a small artifact (dumps + blob write with fsync + one transaction) and of
``resolve``. MLflow: ``create_model_version`` and ``search_model_versions`` on a model with
200 versions, its SQLite store in the same temporary directory. Prints p50s and ratios
(the machine is noisy: a ratio holds, a time does not). Targets (issue #3): resolve p50 under
2 ms and push p50 under 10 ms with 100,000 variants, both ahead of MLflow.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import jax
import jax.export  # older jax releases do not import it with jax
import jax.numpy as jnp
from sqlalchemy import insert

import jaxport
from jaxport.registry import _db
from jaxport.registry._models import Model, Variant, VariantPlatform, Version

_PLATFORMS = [("cpu",), ("cuda",), ("tpu",), ("cpu", "cuda", "tpu")]


def _p50_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3


def prefill(reg: jaxport.Registry, n_variants: int) -> None:
    """Bulk-inserts ``n_variants`` variants (10 versions per name) pointing at one real blob."""
    template = reg.push(jax.export.export(jax.jit(jnp.sin))(jnp.zeros(4)), "template").variants[0]
    now = time.time()
    with _db.write_transaction(reg._engine) as conn:
        n_names = n_variants // 10
        conn.execute(
            insert(Model),
            [
                {"id": 1000 + i, "name": f"m{i}", "last_version": 10, "created_at": now}
                for i in range(n_names)
            ],
        )
        conn.execute(
            insert(Version),
            [
                {
                    "id": 1000 + i,
                    "model_id": 1000 + i // 10,
                    "version": i % 10 + 1,
                    "created_at": now,
                    "metadata_json": "{}",
                }
                for i in range(n_variants)
            ],
        )
        rows, platforms = [], []
        for i in range(n_variants):
            plats = _PLATFORMS[i % len(_PLATFORMS)]
            rows.append(
                {
                    "id": 1000 + i,
                    "version_id": 1000 + i,
                    "digest": template.digest,
                    "fun_name": "f",
                    "platforms": ",".join(plats),
                    "nr_devices": 8 if i % 3 == 0 else 1,
                    "sharded": i % 3 == 0,
                    "calling_convention_version": template.calling_convention_version,
                    "format_version": 1,
                    "jax_version": template.jax_version,
                    "jaxlib_version": template.jaxlib_version,
                    "vjp_order": 0,
                    "shape_polymorphic": False,
                    "custom_call_targets": "[]",
                    "size_bytes": template.size_bytes,
                    "in_signature": template.in_signature,
                    "out_signature": template.out_signature,
                    "created_at": now,
                    "metadata_json": "{}",
                }
            )
            platforms += [{"variant_id": 1000 + i, "platform": p} for p in plats]
        conn.execute(insert(Variant), rows)
        conn.execute(insert(VariantPlatform), platforms)


def bench_jaxport(tmp: Path, n_variants: int, repeat: int) -> dict[str, float]:
    reg = jaxport.Registry(f"sqlite:///{tmp / 'jaxport.db'}", blobs=tmp / "blobs")
    t = time.perf_counter()
    prefill(reg, n_variants)
    print(f"prefilled {n_variants:,} variants in {time.perf_counter() - t:.1f} s")
    exports = [
        jax.export.export(jax.jit(lambda x, s=float(i): x * s))(jnp.zeros(4)) for i in range(repeat)
    ]
    pushes, pushes_alias = [], []
    for i, exp in enumerate(exports):
        t = time.perf_counter()
        reg.push(exp, "target", aliases=["prod"] if i % 2 else ())
        (pushes_alias if i % 2 else pushes).append(time.perf_counter() - t)
    resolves, resolves_big = [], []
    for i in range(repeat):
        t = time.perf_counter()
        reg.resolve("target", platform="cpu")
        resolves.append(time.perf_counter() - t)
        t = time.perf_counter()
        reg.resolve(f"m{(i * 7919) % (n_variants // 10)}", platform="tpu", nr_devices=8)
        resolves_big.append(time.perf_counter() - t)
    pulls = []
    for _ in range(min(repeat, 50)):
        t = time.perf_counter()
        reg.pull("target@prod", platform="cpu")
        pulls.append(time.perf_counter() - t)
    reg.close()
    return {
        "push": _p50_ms(pushes),
        "push + move alias": _p50_ms(pushes_alias),
        "resolve (name with many versions)": _p50_ms(resolves),
        "resolve (random name)": _p50_ms(resolves_big),
        "pull": _p50_ms(pulls),
    }


_MLFLOW = textwrap.dedent(
    """
    import json, statistics, sys, time, warnings, logging
    warnings.filterwarnings("ignore"); logging.disable(logging.WARNING)
    import mlflow
    from mlflow import MlflowClient
    tmp, repeat = sys.argv[1], int(sys.argv[2])
    uri = f"sqlite:///{tmp}/mlflow.db"
    mlflow.set_tracking_uri(uri); mlflow.set_registry_uri(uri)
    client = MlflowClient()
    client.create_registered_model("m")
    creates = []
    for i in range(200):
        t = time.perf_counter()
        client.create_model_version("m", source=f"{tmp}/artifacts/{i}")
        creates.append(time.perf_counter() - t)
    searches = []
    for _ in range(repeat):
        t = time.perf_counter()
        client.search_model_versions("name='m'")
        searches.append(time.perf_counter() - t)
    print(json.dumps({"version": mlflow.__version__,
                      "create_model_version": statistics.median(creates) * 1e3,
                      "search_model_versions": statistics.median(searches) * 1e3}))
    """
)


def bench_mlflow(python: str, tmp: Path, repeat: int) -> dict[str, float] | None:
    proc = subprocess.run(
        [python, "-c", _MLFLOW, str(tmp), str(repeat)], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        print(f"MLflow not measured ({python}): {proc.stderr.strip().splitlines()[-1:]}")
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--mlflow-python", default=sys.executable)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ours = bench_jaxport(Path(tmp), args.variants, args.repeat)
        theirs = bench_mlflow(args.mlflow_python, Path(tmp), args.repeat)
    print(f"\njaxport {jaxport.__version__}, {args.variants:,} variants; p50 in ms")
    print("| operation | jaxport | MLflow (200 versions) | ratio |")
    print("|---|---|---|---|")
    peers = {
        "push": "create_model_version",
        "push + move alias": "create_model_version",
        "resolve (name with many versions)": "search_model_versions",
        "resolve (random name)": "search_model_versions",
        "pull": None,
    }
    for op, ms in ours.items():
        peer = peers[op]
        if theirs and peer:
            print(f"| {op} | {ms:.2f} | {peer}: {theirs[peer]:.2f} | {ms / theirs[peer]:.2f}x |")
        else:
            print(f"| {op} | {ms:.2f} | - | - |")
    if theirs:
        print(f"(MLflow {theirs['version']})")


if __name__ == "__main__":
    main()
