"""What the machine does in the same run as a benchmark: load average and the throughput of the
primitives an archive is made of (memcpy, zstd fast mode, sha256, blake3), so that a ratio can
be read against the machine's limits. Times move with the load of a shared machine; ratios
measured in one run, and these limits, hold better.
"""

from __future__ import annotations

import hashlib
import os
import statistics
import time
from collections.abc import Callable

import numpy as np
import zstandard

__all__ = ["best_and_median", "describe", "interleaved", "load_average"]


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages, and the number of CPUs."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def _gbps(fn: Callable[[], object], nbytes: int, repeat: int = 3) -> float:
    best = min(_seconds(fn) for _ in range(repeat))
    return nbytes / best / 1e9


def _seconds(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def describe(nbytes: int = 256 << 20) -> str:
    """One line: GB/s of memcpy, zstd level -1 (one thread) compressing and decompressing
    random float32, sha256 and blake3 (one thread, and all), on ``nbytes`` in memory."""
    data = np.random.default_rng(0).standard_normal(nbytes // 4, dtype=np.float32).tobytes()
    frame = zstandard.ZstdCompressor(level=-1).compress(data)
    rates = {
        "memcpy": _gbps(lambda: bytearray(data), nbytes),
        "zstd -1": _gbps(lambda: zstandard.ZstdCompressor(level=-1).compress(data), nbytes),
        "unzstd": _gbps(lambda: zstandard.ZstdDecompressor().decompress(frame), nbytes),
        "sha256": _gbps(lambda: hashlib.sha256(data).digest(), nbytes),
    }
    try:
        import blake3

        rates["blake3"] = _gbps(lambda: blake3.blake3(data).digest(), nbytes)
        threads = blake3.blake3.AUTO
        rates["blake3 (all CPUs)"] = _gbps(
            lambda: blake3.blake3(data, max_threads=threads).digest(), nbytes
        )
    except ImportError:
        pass
    return "machine, GB/s (one thread unless said): " + ", ".join(
        f"{k} {v:.2f}" for k, v in rates.items()
    )


def interleaved(
    sides: dict[str, tuple[Callable[[], object], Callable[[], object]]],
    repeat: int,
    cpu: dict[str, list[float]] | None = None,
) -> dict[str, list[float]]:
    """Seconds of each side's ``fn`` in each of ``repeat`` rounds (after one warm-up round),
    the sides taking turns, each run after its ``before`` (untimed): a slow moment of the
    machine falls on every side alike. ``cpu``, when given, gets each run's CPU seconds (this
    process's, all its threads: what a side costs when the machine's cores are taken)."""
    times: dict[str, list[float]] = {name: [] for name in sides}
    for round_ in range(repeat + 1):
        for name, (fn, before) in sides.items():
            before()
            used = time.process_time()
            seconds = _seconds(fn)
            if round_:
                times[name].append(seconds)
                if cpu is not None:
                    cpu.setdefault(name, []).append(time.process_time() - used)
    return times


def best_and_median(times: list[float]) -> tuple[float, float]:
    """The fastest and the median of ``times``."""
    return min(times), statistics.median(times)
