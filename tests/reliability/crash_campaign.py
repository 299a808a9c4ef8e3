"""Crash consistency: SIGKILL a process that pushes, aliases, deletes and runs gc, then check.

Each kill starts ``_crash_worker.py`` on the same registry (the previous kills' leftovers
included), waits until it has opened the registry, and kills it with SIGKILL either after a
random delay or when it reaches a chosen fault point (``_crash_worker.POINTS``: inside a blob
write, between a blob write and the commit, inside gc's transaction). After every kill:

- the registry opens and ``verify()`` is clean (no missing or corrupt blob);
- every push the killed processes *reported* (logged after it returned, fsynced) and did not
  start to delete since is there, names the same digest, and pulls the same bytes;
- every alias pulls;
- the ``pending_blobs`` rows left behind belong to pushes that did not finish: each group of
  rows (one push) holds the archive of an interrupted push, plus its golden examples if it had
  them; a finished push leaves none.

Every ``cleanup_every``-th kill (and after the last) the leftovers are collected:
``gc(min_age=0, temp_age=0)`` removes unreferenced blobs and ``.tmp-*`` files. Pending rows
name the host and pid of their push: gc drops the rows of a pid that is gone at once, so the
blobs of killed pushes are not kept back (``kept_pending`` is counted, and expected 0; rows
that still looked alive, a reused pid say, would protect their blobs for ``PENDING_TTL``).
Any rows left are then aged past ``PENDING_TTL`` (as 24 hours passing would) and a second gc
must remove exactly the blobs the first kept back. Afterwards ``verify().unreferenced`` is
empty, and no ``.tmp-*`` file and no pending row remain. The kills in between leave the
leftovers for the next process (whose own gc runs into them).

Usage (the figures in RELIABILITY.md)::

    python tests/reliability/crash_campaign.py --kills 200 --backend sqlite
    JAXPORT_TEST_POSTGRES_URL=postgresql+psycopg://postgres@127.0.0.1:5432/test \\
        python tests/reliability/crash_campaign.py --kills 200 --backend postgresql

``tests/reliability/test_crash_consistency.py`` runs a few kills of each kind in CI.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import hashlib
import os
import random
import selectors
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

WORKER = Path(__file__).with_name("_crash_worker.py")
POINTS = ("before-put", "in-write", "after-put", "in-gc")
#: Seconds to wait for a worker to open the registry, and for it to reach a chosen point.
READY_TIMEOUT = 120.0
POINT_TIMEOUT = 30.0
POSTGRES_URL_ENV = "JAXPORT_TEST_POSTGRES_URL"
DEFAULT_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


class CampaignError(AssertionError):
    """A check failed after a kill (the message says which kill and what)."""


@dataclasses.dataclass(frozen=True)
class Kill:
    """How one worker is killed: after ``delay`` seconds, or at the ``at``-th ``point``."""

    point: str | None = None
    at: int = 1
    delay: float = 0.0

    def __str__(self) -> str:
        return f"{self.point}#{self.at}" if self.point else f"random {self.delay:.3f}s"


@dataclasses.dataclass
class KillRecord:
    """What one kill left and what the checks found."""

    kill: Kill
    reached: bool = False
    ops: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    interrupted_push: bool = False
    repairs: int = 0
    unreported_versions: int = 0
    checked_versions: int = 0
    temp_files: int = 0
    pending_groups: int = 0
    cleaned: bool = False
    removed_blobs: int = 0
    kept_pending: int = 0
    pending_after_gc: int = 0
    expired_blobs: int = 0
    orphan_rows: int = 0


@dataclasses.dataclass
class Ledger:
    """What the killed processes reported, read from their logs."""

    archives: dict[str, bytes]
    reported: dict[tuple[str, int], str] = dataclasses.field(default_factory=dict)
    ever_seen: set[tuple[str, int]] = dataclasses.field(default_factory=set)
    #: Pushes interrupted since the last cleanup: ``(digest, with examples)``.
    interrupted: list[tuple[str, bool]] = dataclasses.field(default_factory=list)

    def read(self, log: Path, record: KillRecord) -> None:
        """Feeds one worker's log (a last line cut by the kill is ignored)."""
        text = log.read_text(encoding="ascii") if log.exists() else ""
        lines = text.split("\n")[:-1]  # complete lines only
        pushing: tuple[str, bool] | None = None
        for line in lines:
            op, *args = line.split(" ")
            record.ops[op] += 1
            if op == "pushing":
                pushing = (args[1], args[2] == "1")
            elif op == "pushed":
                name, version = _name_version(args[0])
                self.reported[(name, version)] = args[1]
                self.ever_seen.add((name, version))
                record.repairs += int(args[2])
                pushing = None
            elif op == "deleting":
                self._forget(args[0])
        if pushing is not None:
            self.interrupted.append(pushing)
            record.interrupted_push = True

    def _forget(self, target: str) -> None:
        if ":" in target:
            self.reported.pop(_name_version(target), None)
        else:
            for key in [k for k in self.reported if k[0] == target]:
                del self.reported[key]


def _name_version(text: str) -> tuple[str, int]:
    name, _, version = text.partition(":")
    return name, int(version)


# -- archives ---------------------------------------------------------------------------------


def make_archives(directory: Path) -> dict[str, bytes]:
    """Writes the archives the workers push: five small ones (``f32[3]``, they can carry golden
    examples) and one of about 1 MB (an incompressible constant), so that random kills also
    land inside long writes. Returns ``{digest: bytes}``."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import jaxport

    directory.mkdir(parents=True, exist_ok=True)
    small = (jnp.sin, jnp.cos, jnp.tanh, jnp.exp, jnp.abs)
    out = {}
    for i, fn in enumerate(small):
        exp = jax.export.export(jax.jit(fn))(jax.ShapeDtypeStruct((3,), jnp.float32))
        out[f"small-{i}"] = jaxport.dumps(exp)
    noise = np.random.default_rng(0).standard_normal(250_000).astype(np.float32)
    big = jax.export.export(jax.jit(lambda x: x + noise))(
        jax.ShapeDtypeStruct(noise.shape, jnp.float32)
    )
    out["big-0"] = jaxport.dumps(big)
    for stem, data in out.items():
        (directory / f"{stem}.jaxport").write_bytes(data)
    return {hashlib.sha256(d).hexdigest(): d for d in out.values()}


# -- one kill ---------------------------------------------------------------------------------


def run_worker(url: str, blobs: Path, archives: Path, log: Path, seed: int, kill: Kill) -> bool:
    """Starts a worker and SIGKILLs it as ``kill`` says; returns whether a chosen point was
    reached.

    Raises:
        CampaignError: the worker did not start, or ended by itself (an error to a caller).
    """
    args = [str(url), str(blobs), str(archives), str(log), str(seed)]
    if kill.point is not None:
        args += [kill.point, str(kill.at)]
    err = tempfile.TemporaryFile()  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), *args], stdout=subprocess.PIPE, stderr=err
    )
    try:
        with _lines(proc) as next_line:
            if next_line(READY_TIMEOUT) != "ready":
                raise CampaignError(f"the worker did not start: {_tail(proc, err)}")
            reached = False
            if kill.point is None:
                time.sleep(kill.delay)
            else:
                reached = next_line(POINT_TIMEOUT) == f"blocked {kill.point}"
            if proc.poll() is not None:
                raise CampaignError(f"the worker failed before the kill: {_tail(proc, err)}")
            proc.kill()
            proc.wait()
        return reached
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        err.close()


@contextlib.contextmanager
def _lines(proc: subprocess.Popen[bytes]) -> Iterator[Any]:
    """``next_line(timeout)``: the worker's next stdout line, or None at EOF or timeout."""
    assert proc.stdout is not None
    stdout = proc.stdout
    selector = selectors.DefaultSelector()
    selector.register(stdout, selectors.EVENT_READ)

    def next_line(timeout: float) -> str | None:
        if not selector.select(timeout):
            return None
        line = stdout.readline()
        return line.decode().strip() if line else None

    try:
        yield next_line
    finally:
        selector.close()
        stdout.close()


def _tail(proc: subprocess.Popen[bytes], err: Any) -> str:
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    err.seek(0)
    lines = err.read().decode(errors="replace").strip().splitlines()
    return f"exit {proc.returncode}: " + " | ".join(lines[-8:])


# -- checks -----------------------------------------------------------------------------------


def temp_files(blobs: Path) -> list[Path]:
    """The ``.tmp-*`` files under the blob root."""
    return [p for p in blobs.rglob(".tmp-*") if p.is_file()] if blobs.exists() else []


def pending_groups(url: str) -> dict[str, set[str]]:
    """The ``pending_blobs`` rows: ``{token: digests}``."""
    from sqlalchemy import select

    from jaxport.registry._db import create_registry_engine
    from jaxport.registry._models import PendingBlobRow

    engine = create_registry_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(select(PendingBlobRow.token, PendingBlobRow.digest)).all()
    finally:
        engine.dispose()
    groups: dict[str, set[str]] = collections.defaultdict(set)
    for token, digest in rows:
        groups[token].add(digest)
    return dict(groups)


def orphan_blob_rows(url: str, blobs: Path) -> int:
    """``blobs`` rows whose file is gone and that nothing refers to: what a gc killed inside
    its transaction leaves (it deletes each file before its row commits; a later push of the
    same archive writes the file again and reports it repaired)."""
    from sqlalchemy import select

    from jaxport.registry import LocalBlobStore
    from jaxport.registry._db import create_registry_engine
    from jaxport.registry._maintenance import referenced
    from jaxport.registry._models import BlobRow

    engine = create_registry_engine(url)
    try:
        with engine.connect() as conn:
            rows = set(conn.execute(select(BlobRow.digest)).scalars())
            used = referenced(conn)
    finally:
        engine.dispose()
    return len(rows - used - set(LocalBlobStore(blobs).digests()))


def expire_pending(url: str) -> None:
    """Ages every ``pending_blobs`` row past ``PENDING_TTL``, as if a day had gone by."""
    from sqlalchemy import update

    from jaxport.registry._db import create_registry_engine, write_transaction
    from jaxport.registry._models import PendingBlobRow
    from jaxport.registry._publish import PENDING_TTL

    engine = create_registry_engine(url)
    try:
        with write_transaction(engine) as conn:
            conn.execute(
                update(PendingBlobRow).values(
                    created_at=PendingBlobRow.created_at - PENDING_TTL - 60
                )
            )
    finally:
        engine.dispose()


def check_registry(reg: Any, ledger: Ledger, record: KillRecord) -> None:
    """The checks after every kill (module docstring), counting what was verified.

    Raises:
        CampaignError: a check failed.
    """
    report = reg.verify()
    _require(report.ok, f"verify is not clean: {report.problems}")
    for (name, version), digest in sorted(ledger.reported.items()):
        ref = reg.get(f"{name}:{version}")
        _require(ref.digests == (digest,), f"{name}:{version} holds {ref.digests}, not {digest}")
        data = reg.pull_bytes(f"{name}:{version}", platform=None)
        _require(data == ledger.archives[digest], f"{name}:{version} pulls other bytes")
        record.checked_versions += 1
    for name in reg.names():
        for alias in reg.aliases(name):
            reg.pull_bytes(f"{name}@{alias}", platform=None)
        for ref in reg.list(name, limit=100_000):
            if (name, ref.version) not in ledger.ever_seen:
                ledger.ever_seen.add((name, ref.version))
                record.unreported_versions += 1  # committed, killed before it was reported


def check_pending(url: str, ledger: Ledger, record: KillRecord) -> dict[str, set[str]]:
    """Every group of pending rows is an interrupted push's archive (and examples).

    Raises:
        CampaignError: a group that no interrupted push accounts for.
    """
    groups = pending_groups(url)
    record.pending_groups = len(groups)
    unclaimed = list(ledger.interrupted)
    for token, digests in groups.items():
        match = next(
            (p for p in unclaimed if p[0] in digests and len(digests) <= (2 if p[1] else 1)),
            None,
        )
        _require(match is not None, f"pending rows {token} {sorted(digests)} of no interrupted "
                 f"push (interrupted: {ledger.interrupted})")  # fmt: skip
        unclaimed.remove(match)  # type: ignore[arg-type]
    return groups


def clean_up(reg: Any, url: str, blobs: Path, ledger: Ledger, record: KillRecord) -> None:
    """gc, expire the pending rows, gc again; then nothing unreferenced or temporary is left.

    Raises:
        CampaignError: something is left, or the second gc removed other blobs than the
            pending rows had kept back.
    """
    groups = check_pending(url, ledger, record)
    first = reg.gc(min_age=0, temp_age=0)
    pending = set().union(*groups.values()) if groups else set()
    _require(set(first.kept_pending) <= pending, "kept back blobs no pending row holds")
    record.pending_after_gc = len(pending_groups(url))
    expire_pending(url)
    second = reg.gc(min_age=0, temp_age=0)
    _require(
        set(second.digests) == set(first.kept_pending),
        f"after expiry gc removed {second.digests}, expected {first.kept_pending}",
    )
    after = reg.verify()
    _require(after.ok and not after.unreferenced, f"left after cleanup: {after}")
    _require(not temp_files(blobs), f"temporary files left: {temp_files(blobs)}")
    _require(not pending_groups(url), "pending rows left after expiry")
    record.cleaned = True
    record.removed_blobs = len(first.digests)
    record.kept_pending = len(first.kept_pending)
    record.expired_blobs = len(second.digests)
    record.orphan_rows = orphan_blob_rows(url, blobs)
    ledger.interrupted.clear()


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise CampaignError(message)


# -- the campaign ------------------------------------------------------------------------------


def schedule(kills: int, rng: random.Random, max_delay: float) -> list[Kill]:
    """Half the kills after a random delay, half at a chosen point (in turn, K in 1..3)."""
    out = []
    for i in range(kills):
        if i % 2 == 0:
            out.append(Kill(delay=rng.uniform(0.0, max_delay)))
        else:
            out.append(Kill(POINTS[(i // 2) % len(POINTS)], at=rng.randint(1, 3)))
    return out


def run_campaign(
    url: str,
    workdir: Path,
    kills: Sequence[Kill],
    *,
    seed: int = 0,
    cleanup_every: int = 2,
    progress: Any = None,
) -> list[KillRecord]:
    """Kills one worker per entry of ``kills`` on the registry at ``url`` (blobs under
    ``workdir``), checking after each.

    Raises:
        CampaignError: a check failed (the message names the kill).
    """
    import jaxport

    blobs, logs = workdir / "blobs", workdir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    ledger = Ledger(make_archives(workdir / "archives"))
    records = []
    for i, kill in enumerate(kills):
        record = KillRecord(kill)
        log = logs / f"{i:05d}.log"
        try:
            record.reached = run_worker(url, blobs, workdir / "archives", log, seed + i, kill)
            ledger.read(log, record)
            record.temp_files = len(temp_files(blobs))
            with jaxport.Registry(url, blobs=blobs) as reg:
                check_registry(reg, ledger, record)
                check_pending(url, ledger, record)
                if (i + 1) % cleanup_every == 0 or i == len(kills) - 1:
                    clean_up(reg, url, blobs, ledger, record)
        except CampaignError as e:
            raise CampaignError(f"kill {i} ({kill}): {e}") from None
        records.append(record)
        if progress is not None:
            progress(i, record)
    return records


# -- figures -----------------------------------------------------------------------------------


def figures(records: Sequence[KillRecord], seconds: float) -> list[tuple[str, str]]:
    """The campaign's figures as ``(label, value)`` rows."""
    ops: collections.Counter[str] = collections.Counter()
    for r in records:
        ops.update(r.ops)
    by_point = collections.Counter(str(r.kill.point or "random") for r in records)
    reached = collections.Counter(str(r.kill.point) for r in records if r.reached)
    cleaned = [r for r in records if r.cleaned]
    points = ", ".join(f"{p} {reached[p]}/{by_point[p]}" for p in POINTS if by_point[p])
    rows = [
        ("kills (SIGKILL)", str(len(records))),
        ("  after a random delay", str(by_point["random"])),
        ("  at a chosen point (reached/asked)", points or "0"),
        ("operations reported by the killed processes",
         f"{ops['pushed']} pushes, {ops['alias']} alias moves, {ops['deleting']} deletes, "
         f"{ops['gc']} gc runs, {ops['pulled']} pulls"),
        ("kills inside a push", str(sum(r.interrupted_push for r in records))),
        ("pushes committed but killed before reporting",
         str(sum(r.unreported_versions for r in records))),
        ("registry opened, verify() clean", f"{len(records)}/{len(records)}"),
        ("reported versions checked (digest and bytes)",
         str(sum(r.checked_versions for r in records))),
        ("lost, wrong or corrupt versions", "0"),
        ("kills that left .tmp-* files", str(sum(r.temp_files > 0 for r in records))),
        ("cleanups (gc, expire pending rows, gc)", str(len(cleaned))),
        ("  unreferenced blobs removed by the first gc",
         str(sum(r.removed_blobs for r in cleaned))),
        ("  pushes with pending rows at the cleanup (killed)",
         str(sum(r.pending_groups for r in cleaned))),
        ("  ... rows left by the first gc (dead pid: dropped)",
         str(sum(r.pending_after_gc for r in cleaned))),
        ("  blobs kept back by pending rows of killed pushes",
         f"{sum(r.kept_pending for r in cleaned)} "
         f"(in {sum(r.kept_pending > 0 for r in cleaned)} cleanups)"),
        ("  ... removed once the rows expired", str(sum(r.expired_blobs for r in cleaned))),
        ("  left after cleanup (unreferenced, .tmp-*, pending rows)", "0, 0, 0"),
        ("  blobs rows without file or user at the end (gc killed)",
         str(cleaned[-1].orphan_rows if cleaned else 0)),
        ("pushes that reported a repaired blob", str(sum(r.repairs for r in records))),
        ("wall time", f"{seconds:.0f} s ({seconds / max(len(records), 1):.2f} s per kill)"),
    ]  # fmt: skip
    return rows


@contextlib.contextmanager
def postgres_schema(base: str) -> Iterator[str]:
    """A fresh PostgreSQL schema on ``base`` for the campaign; dropped afterwards."""
    import sqlalchemy as sa

    schema = f"crash_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(base)
    with admin.begin() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    sep = "&" if "?" in base else "?"
    try:
        yield f"{base}{sep}options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=200)
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--max-delay",
        type=float,
        default=0.5,
        help="longest random delay after the worker is ready, in seconds",
    )
    parser.add_argument("--cleanup-every", type=int, default=2)
    parser.add_argument(
        "--postgres-url", default=os.environ.get(POSTGRES_URL_ENV, DEFAULT_POSTGRES_URL)
    )
    args = parser.parse_args(argv)  # fmt: skip
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # kill the worker, drop the schema
    rng = random.Random(args.seed)
    kills = schedule(args.kills, rng, args.max_delay)

    def progress(i: int, record: KillRecord) -> None:
        if (i + 1) % 20 == 0:
            print(f"  {i + 1}/{len(kills)} kills", file=sys.stderr, flush=True)

    start = time.perf_counter()
    with (
        tempfile.TemporaryDirectory(prefix="jaxport-crash-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        if args.backend == "sqlite":
            url = f"sqlite:///{tmp}/registry.db"
        else:
            url = stack.enter_context(postgres_schema(args.postgres_url))
        records = run_campaign(
            url, Path(tmp), kills, seed=args.seed, cleanup_every=args.cleanup_every,
            progress=progress,
        )  # fmt: skip
    seconds = time.perf_counter() - start
    print(f"crash campaign: backend {args.backend}, seed {args.seed}, "
          f"max delay {args.max_delay} s")  # fmt: skip
    for label, value in figures(records, seconds):
        print(f"{label:<58} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
