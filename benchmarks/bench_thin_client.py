"""The ``jaxport`` command as a registry server's client: wall time per call, in one run.

    python benchmarks/bench_thin_client.py [--runs 10]

Starts a ``jaxport serve`` over a fresh SQLite registry holding one pushed function, then
times the installed ``jaxport --registry URL ls`` (and ``show NAME``, ``log``) ``--runs``
times each, as a user's shell runs them (a new process each: interpreter start, imports,
one request, exit), interleaved with ``python -c pass`` (the interpreter's own start, the
floor of any Python command). Prints each command's median and its ratio to that floor, and
which heavy modules (jax, SQLAlchemy) one such call imports.

Target (issue 25 §4): < 0.5 s per call on an idle 2-core machine. The machine may be shared:
the ratio to ``python -c pass`` measured in the same run holds better than a time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp

import jaxport

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).parent))
from _machine import load_average
from _server import JAXPORT, admin_token, serving

TARGET_SECONDS = 0.5
#: One call in a process of its own, then the heavy modules it imported (stderr's last line).
PROBE = """
import sys
from jaxport._cli.main import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"jax", "jaxlib", "sqlalchemy"})
print(",".join(heavy) or "none", file=sys.stderr)
"""


def _seconds(argv: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True, timeout=120)
    return time.perf_counter() - t


def _heavy(args: list[str], env: dict[str, str]) -> str:
    proc = subprocess.run(
        [sys.executable, "-P", "-c", PROBE, *args], env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    return proc.stderr.strip().splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        db, blobs = f"sqlite:///{work / 'r.db'}", str(work / "blobs")
        archive = work / "sin.jaxport"
        jaxport.save(jax.export.export(jax.jit(jnp.sin))(jnp.zeros(3)), archive)
        with serving(db, blobs, work / "serve.log") as server:
            env = {k: v for k, v in os.environ.items() if not k.startswith("JAXPORT_")}
            env.update(JAXPORT_TOKEN=admin_token(db, blobs), JAXPORT_HOME=str(work / "home"))
            base = ["--registry", server.url]
            subprocess.run([JAXPORT, *base, "push", str(archive), "--name", "sin"], env=env,
                           check=True, capture_output=True, timeout=300)  # fmt: skip
            commands = {"ls": ["ls"], "show": ["show", "sin"], "log": ["log"]}
            floor_argv = [sys.executable, "-c", "pass"]
            times: dict[str, list[float]] = {"python -c pass": []} | {c: [] for c in commands}
            for argv in [floor_argv] + [[JAXPORT, *base, *c] for c in commands.values()]:
                _seconds(argv, env)  # warm the page cache once
            for _ in range(runs):  # interleaved: a load change touches every command alike
                times["python -c pass"].append(_seconds(floor_argv, env))
                for name, args in commands.items():
                    times[name].append(_seconds([JAXPORT, *base, *args], env))
            heavy = {name: _heavy([*base, *args], env) for name, args in commands.items()}
    floor = statistics.median(times["python -c pass"])
    print(load_average())
    print(f"{runs} runs each, median wall time per call (a new process each):")
    print(f"  python -c pass          {floor * 1e3:7.1f} ms")
    for name in commands:
        median = statistics.median(times[name])
        verdict = "ok" if median < TARGET_SECONDS else f"over the {TARGET_SECONDS} s target"
        print(
            f"  jaxport --registry URL {name:<5} {median * 1e3:7.1f} ms = "
            f"{median / floor:5.1f}x python -c pass; imports {heavy[name]}; {verdict}"
        )


if __name__ == "__main__":
    main()
