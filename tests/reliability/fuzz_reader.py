"""A long fuzzing campaign against the archive reader (``loads``, every ``.vjp()``, ``inspect``).

Each case is a digest-valid archive: a structure-aware hostile header (``_generate``) or a real
archive with a few bytes mutated and every digest recomputed. The reader must raise nothing but
``jaxport.JaxportError`` and take well under a second. Run from the repository root:

    python tests/reliability/fuzz_reader.py --cases 100000

It prints the cases run, the exceptions that escaped as something else than a
``JaxportError`` (must be 0), the cases over 1 s (must be 0), the slowest case, memory (the
largest allocation peak of one case, by tracemalloc every ``--memory-every`` cases, and the
growth of a worker's peak RSS), and the cases that killed the process (a native crash in a
library under the reader) or stayed stuck for a minute. The cases run in worker processes,
so that such a case is recorded, saved and skipped instead of ending the campaign. Archives
of failing cases are saved under ``--save-dir``; ``--case I`` replays case ``I`` (same
``--seed``) in this process, with its traceback.

``--corpus`` instead measures each file of ``corpus/`` (median time of 3 reads, and the peak
allocation of one, for ``loads`` and for ``inspect``).

``--atheris`` instead runs coverage-guided fuzzing (atheris 3.0 installs from a wheel on
Linux x86-64 / CPython 3.11) over the same mutator, for ``--cases`` runs.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import json
import os
import resource
import shutil
import subprocess
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
sys.path.insert(0, str(Path(__file__).parent))

SLOW_SECONDS = 1.0
STUCK_SECONDS = 60
_CHECKPOINT_EVERY = 1000


def main() -> int:
    args = _parser().parse_args()
    if args.corpus:
        return _measure_corpus()
    if args.worker:
        return _worker(args)
    if args.atheris or args.case is not None:
        from _generate import generators
        from _harness import real_archives

        real = real_archives()
        if args.atheris:
            return _atheris(real, args.cases)
        return _replay(generators(real), args.seed, args.case)
    return _campaign(args)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--cases", type=int, default=10_000, help="how many archives to read")
    p.add_argument("--seed", type=int, default=0, help="campaign seed")
    p.add_argument("--memory-every", type=int, default=10, help="tracemalloc every N cases")
    p.add_argument("--save-dir", type=Path, default=Path("/tmp/jaxport-fuzz-failures"))
    p.add_argument("--case", type=int, help="replay one case, with its traceback")
    p.add_argument("--verbose", action="store_true", help="keep MLIR/XLA messages on stderr")
    p.add_argument("--atheris", action="store_true", help="coverage-guided, with atheris")
    p.add_argument("--corpus", action="store_true", help="time and memory of each corpus file")
    p.add_argument("--summary", type=Path, help="also write the figures to this JSON file")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--skip", type=int, nargs="*", default=[], help=argparse.SUPPRESS)
    return p


def _source(seed: int, case: int) -> Any:
    from _generate import RandomSource

    return RandomSource(seed * 2**32 + case)


class _Stats:
    """What a run of cases found; merged across workers."""

    def __init__(self) -> None:
        self.cases = 0
        self.outcomes: Counter[str] = Counter()
        self.raw: Counter[str] = Counter()
        self.slow: list[int] = []
        self.worst = (0.0, -1)
        self.peak = (0, -1)
        self.rss_growth = 0
        self.crashes: list[tuple[int, str, bool]] = []  # (case, why, in MLIR's module parse)

    def to_json(self) -> str:
        return json.dumps(
            {
                "cases": self.cases,
                "outcomes": dict(self.outcomes),
                "raw": dict(self.raw),
                "slow": self.slow,
                "worst": self.worst,
                "peak": self.peak,
                "rss_growth": self.rss_growth,
            }
        )

    def merge(self, line: str) -> None:
        d = json.loads(line)
        self.cases += d["cases"]
        self.outcomes.update(d["outcomes"])
        self.raw.update(d["raw"])
        self.slow += d["slow"]
        self.worst = max(self.worst, tuple(d["worst"]))  # type: ignore[assignment]
        self.peak = max(self.peak, tuple(d["peak"]))  # type: ignore[assignment]
        self.rss_growth = max(self.rss_growth, d["rss_growth"])


def _campaign(args: argparse.Namespace) -> int:
    """Runs workers until every case is done; a case that kills one is recorded and skipped."""
    args.save_dir.mkdir(parents=True, exist_ok=True)
    total, start, skip = _Stats(), 0, list[int]()
    began = time.perf_counter()
    while start < args.cases:
        start, crashed = _run_worker(args, start, skip, total)
        if crashed is not None:
            case, why, in_parse = crashed
            total.crashes.append((case, why, in_parse))
            skip.append(case)
            saved = args.save_dir / f"crash-case{case}.jaxport"
            shutil.copy(args.save_dir / "current.jaxport", saved)
            print(f"  case {case}: {why}; archive saved, going on", flush=True)
    _report(total, args, time.perf_counter() - began)
    if args.summary is not None:
        summary = json.loads(total.to_json())
        summary["crashes"] = [
            {"case": c, "why": w, "in_module_parse": p} for c, w, p in total.crashes
        ]
        args.summary.write_text(json.dumps(summary))
    return 1 if total.raw or total.slow or total.crashes else 0


def _run_worker(
    args: argparse.Namespace, start: int, skip: list[int], total: _Stats
) -> tuple[int, tuple[int, str, bool] | None]:
    """One worker from case ``start``: ``(next case to run, crash or None)``.

    A crash is ``(case, why, in_parse)``; ``in_parse`` says whether the dying thread's stack
    (faulthandler's, in ``crash-stack.txt``) was in MLIR's module parse, the known jaxlib
    fault (``_compat.module_from_portable_artifact``), rather than anywhere else.
    """
    command = [sys.executable, __file__, "--worker", "--start", str(start)]
    command += ["--cases", str(args.cases), "--seed", str(args.seed)]
    command += ["--memory-every", str(args.memory_every), "--save-dir", str(args.save_dir)]
    command += ["--skip", *map(str, skip)] + (["--verbose"] if args.verbose else [])
    done = start
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as worker:
        assert worker.stdout is not None
        for line in worker.stdout:
            if line.startswith("{"):
                checkpoint = json.loads(line)
                total.merge(line)
                done = checkpoint["next"]
            else:
                print(line, end="", flush=True)
    if worker.returncode == 0:
        return args.cases, None
    case = int((args.save_dir / "current.txt").read_text())
    why = f"killed the worker (exit {worker.returncode})"
    if worker.returncode < 0:
        why = f"killed the worker with signal {-worker.returncode}"
    stack_file = args.save_dir / "crash-stack.txt"
    stack = stack_file.read_text(errors="replace") if stack_file.exists() else ""
    in_parse = "module_from_portable_artifact" in stack
    why += ", in MLIR's module parse" if in_parse else ", outside MLIR's module parse"
    # Cases between the last checkpoint and the crash ran, but their results were lost.
    return done, (case, why, in_parse)


def _worker(args: argparse.Namespace) -> int:
    from _generate import generators
    from _harness import check_archive, real_archives

    makers = generators(real_archives())
    for i in range(20):  # warm up jax's caches before the RSS baseline
        check_archive(makers[i % len(makers)](_source(args.seed + 1, i)))
    skip = set(args.skip)
    current = (args.save_dir / "current.txt").open("w")
    faulthandler.enable((args.save_dir / "crash-stack.txt").open("w"))
    stuck = (args.save_dir / "stuck-stacks.txt").open("a")
    stats, rss_before = _Stats(), _max_rss()
    with _quiet_stderr(not args.verbose):
        for i in range(args.start, args.cases):
            if i not in skip:
                data = makers[i % len(makers)](_source(args.seed, i))
                current.seek(0)
                current.write(f"{i:<12d}")
                current.flush()
                (args.save_dir / "current.jaxport").write_bytes(data)
                faulthandler.dump_traceback_later(STUCK_SECONDS, exit=True, file=stuck)
                _one(check_archive(data, measure_memory=i % args.memory_every == 0), i, stats)
                faulthandler.cancel_dump_traceback_later()
                _save_raw(args, i, data, stats)
            if (i + 1) % _CHECKPOINT_EVERY == 0 or i + 1 == args.cases:
                stats.rss_growth = _max_rss() - rss_before
                print(json.dumps({**json.loads(stats.to_json()), "next": i + 1}), flush=True)
                stats = _Stats()
            if (i + 1) % 10_000 == 0:
                print(f"  {i + 1} cases done", flush=True)
    return 0


_LAST_RAW: dict[int, BaseException] = {}


def _one(outcome: Any, case: int, stats: _Stats) -> None:
    stats.cases += 1
    stats.outcomes[outcome.error or "loaded"] += 1
    if outcome.raw is not None:
        stats.raw[type(outcome.raw).__name__] += 1
        _LAST_RAW[case] = outcome.raw
    if outcome.seconds > SLOW_SECONDS:
        stats.slow.append(case)
        print(f"  case {case}: {outcome.seconds:.2f} s", flush=True)
    stats.worst = max(stats.worst, (outcome.seconds, case))
    if outcome.peak_bytes is not None:
        stats.peak = max(stats.peak, (outcome.peak_bytes, case))


def _save_raw(args: argparse.Namespace, case: int, data: bytes, stats: _Stats) -> None:
    error = _LAST_RAW.pop(case, None)
    if error is not None:
        (args.save_dir / f"seed{args.seed}-case{case}.jaxport").write_bytes(data)
        print(f"  case {case}: {type(error).__name__}: {str(error)[:200]}", flush=True)


def _report(total: _Stats, args: argparse.Namespace, elapsed: float) -> None:
    worst, worst_case = total.worst
    peak, peak_case = total.peak
    crashes = ", ".join(f"case {c}: {why}" for c, why, _ in total.crashes) or "none"
    print(f"cases:                          {total.cases} (seed {args.seed})")
    print(f"exceptions outside JaxportError: {sum(total.raw.values())} {dict(total.raw)}")
    print(f"cases over {SLOW_SECONDS:g} s:                {len(total.slow)} {total.slow[:10]}")
    print(f"max seconds per case:           {worst:.3f} (case {worst_case})")
    print(f"peak allocation of one case:    {peak / 2**20:.1f} MiB (case {peak_case}, tracemalloc)")
    print(f"worker peak RSS growth:         {total.rss_growth / 2**20:.1f} MiB")
    print(f"cases that killed a worker:     {len(total.crashes)} ({crashes})")
    print(f"wall time:                      {elapsed:.0f} s, {total.cases / elapsed:.0f} cases/s")
    print(f"outcomes:                       {dict(total.outcomes.most_common())}")


def _max_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


@contextlib.contextmanager
def _quiet_stderr(quiet: bool) -> Iterator[None]:
    """Silences the C++ libraries' messages (MLIR parse errors of mutated modules)."""
    if not quiet:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _replay(makers: Sequence[Callable[[Any], bytes]], seed: int, case: int) -> int:
    from _harness import check_archive

    data = makers[case % len(makers)](_source(seed, case))
    outcome = check_archive(data, measure_memory=True)
    print(f"case {case}: {len(data)} bytes, {outcome.seconds:.3f} s, error {outcome.error}")
    if outcome.raw is not None:
        traceback.print_exception(outcome.raw)
        return 1
    return 0


def _measure_corpus() -> int:
    import statistics
    import tracemalloc

    import jaxport

    def read(reader: Callable[[bytes], Any], data: bytes) -> None:
        with contextlib.suppress(jaxport.JaxportError):
            reader(data)

    print(f"{'file':22s} {'bytes':>8s}  {'loads':>9s} {'MiB':>5s}  {'inspect':>9s} {'MiB':>5s}")
    for path in sorted((Path(__file__).parent / "corpus").glob("*.jaxport")):
        data = path.read_bytes()
        cells = []
        for reader in (jaxport.loads, jaxport.inspect):
            times = []
            for _ in range(3):
                start = time.perf_counter()
                read(reader, data)
                times.append(time.perf_counter() - start)
            tracemalloc.start()
            read(reader, data)
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            cells.append(f"{statistics.median(times) * 1e3:7.1f}ms {peak / 2**20:5.1f}")
        print(f"{path.stem:22s} {len(data):8d}  {cells[0]}  {cells[1]}")
    return 0


def _atheris(real: list[bytes], runs: int) -> int:
    import atheris
    from _generate import mutate
    from _harness import check_archive

    class _Provider:
        def __init__(self, data: bytes) -> None:
            self._fdp = atheris.FuzzedDataProvider(data)

        def integer(self, lo: int, hi: int) -> int:
            return int(self._fdp.ConsumeIntInRange(lo, hi))

        def choice(self, options: Sequence[Any]) -> Any:
            return options[self.integer(0, len(options) - 1)]

        def blob(self, max_size: int) -> bytes:
            return bytes(self._fdp.ConsumeBytes(self.integer(0, max_size)))

    def one(data: bytes) -> None:
        provider = _Provider(data)
        archive = mutate(provider, provider.choice(real))
        outcome = check_archive(archive)
        if outcome.raw is not None:
            raise outcome.raw
        if outcome.seconds > SLOW_SECONDS:
            raise TimeoutError(f"{outcome.seconds:.2f} s")

    atheris.instrument_all()
    atheris.Setup([sys.argv[0], f"-runs={runs}"], one)
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main())
