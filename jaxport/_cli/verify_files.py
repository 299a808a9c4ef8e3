"""``jaxport verify FILE...``: local archive files checked in full, without a registry.

Each FILE (function or model archive) is read as ``jaxport.load`` / ``load_model`` would: the
header (magic, format version, limits, its sha256), then, in an audit worker process
(``jaxport.audit.run_audits``, as ``verify --deep`` reads registry archives), every section
against its sha256, every module (primal and each VJP level) through the module sandbox, and
a model's every tensor. A crash or hang of jaxlib there is a ``crash`` row, not the end of the
command. A TARGET is a FILE when it is an existing path (``jaxport sign`` and ``verify
--signatures`` tell them apart the same way).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Sequence
from pathlib import Path

from jaxport._errors import CorruptArchiveError, JaxportError

__all__ = ["FileCheck", "file_lines", "missing_paths", "verify_files"]


@dataclasses.dataclass(frozen=True)
class FileCheck:
    """One file's verdict: ``ok``; ``status`` ``ok``, ``error`` or ``crash`` (the reader's
    worker died or hung); ``reason`` says what is wrong (``Type: message``). ``kind``
    (``function`` or ``model``), ``format_version`` and ``sha256`` (of the whole file, hex)
    are None where the file could not be read that far."""

    path: str
    ok: bool
    status: str
    reason: str
    kind: str | None
    format_version: int | None
    sha256: str | None


def _read(path: str) -> bytes:
    from jaxport._files import read_regular

    return read_regular(path, CorruptArchiveError)


def verify_files(paths: Sequence[str], *, timeout: float) -> list[FileCheck]:
    """Checks each file in ``paths`` in full (see the module docstring), one worker job per
    file whose header reads; ``timeout``: seconds one file may take before its worker is
    killed (a ``crash``).

    Never raises for a bad file: each problem is a row.
    """
    from jaxport.audit import AuditJob, run_audits
    from jaxport.export import inspect

    rows: dict[str, FileCheck] = {}
    readable: list[tuple[str, str, int, str]] = []
    for path in paths:
        try:
            data = _read(path)
            info = inspect(data)
        except (JaxportError, OSError) as e:
            rows[path] = FileCheck(path, False, "error", _reason(e), None, None, None)
            continue
        digest = hashlib.sha256(data).hexdigest()
        del data  # the worker reads the file again, one in memory at a time
        readable.append((path, info.kind, info.format_version, digest))
    if readable:
        jobs = [AuditJob(functools.partial(_read, p), None) for p, _, _, _ in readable]
        _, results = run_audits(jobs, timeout=timeout)
        for (path, kind, version, digest), r in zip(readable, results, strict=True):
            ok = r.status == "ok"
            reason = r.reason if not ok else "every digest and every module check out"
            if ok and "newer" in r.checks:  # valid, written by a newer jax: said so
                reason = r.reason
            rows[path] = FileCheck(path, ok, r.status, reason, kind, version, digest)
    return [rows[p] for p in paths]


def _reason(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror and error.filename:
        return f"{type(error).__name__}: {error.filename}: {error.strerror}"
    return f"{type(error).__name__}: {error}"


def file_lines(checks: Sequence[FileCheck]) -> str:
    """One line per file: ``ok PATH (kind, format N, sha256:...)`` (followed by ``: newer than
    this jax ...`` for a valid archive a newer jax wrote) or ``STATUS PATH: why``."""
    lines = []
    for c in checks:
        if c.ok:
            digest = (c.sha256 or "")[:12]
            newer = f": {c.reason}" if "newer than this jax" in c.reason else ""
            lines.append(
                f"ok {c.path} ({c.kind}, format {c.format_version}, sha256:{digest}){newer}"
            )
        else:
            lines.append(f"{c.status} {c.path}: {c.reason}")
    return "\n".join(lines)


def missing_paths(targets: Sequence[str]) -> list[str]:
    """The targets that are not existing paths (so not FILEs)."""
    return [t for t in targets if not Path(t).exists()]
