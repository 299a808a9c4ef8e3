"""The serving side of the main job: a process with the registry URL and nothing else.

    python examples/serve.py --registry URL --blobs DIR --reference FILE [--ref transformer-lm@prod]

No weights and no model code here (this file imports neither jax's model code nor
examples/models.py): it pulls the model by reference, runs its methods on the inputs the
exporting process saved in FILE (an .npz) and checks the numbers against the outputs saved
beside them. Exit status 0 when every method matches, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import numpy as np

import jaxport


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--registry", required=True, help="database URL")
    parser.add_argument("--blobs", required=True, help="blob directory or fsspec URL")
    parser.add_argument("--reference", required=True, help=".npz the exporting process wrote")
    parser.add_argument("--ref", default="transformer-lm@prod", help="what to pull")
    args = parser.parse_args()
    reference = np.load(args.reference, allow_pickle=False)
    with jaxport.Registry(args.registry, blobs=args.blobs) as registry:
        model = registry.pull_model(args.ref)
        print(
            f"  [serving process] pulled {args.ref}: methods {list(model.methods)}, "
            f"{len(model.tensors)} tensors, {model.bytes_read:,} tensor bytes read so far"
        )
        ok = True
        for name in model.methods:
            inputs = [reference[k] for k in sorted(reference.files) if k.startswith(f"{name}.in")]
            got = np.asarray(model.methods[name](*inputs))
            want = reference[f"{name}.out"]
            match = np.allclose(got, want, rtol=2e-4, atol=2e-5)
            ok &= bool(match)
            print(
                f"  [serving process] {name}{[i.shape for i in inputs]} -> {got.shape}: "
                f"{'matches' if match else 'DIFFERS from'} the exporting process"
            )
        print(f"  [serving process] {model.bytes_read:,} tensor bytes read, each verified")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
