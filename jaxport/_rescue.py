"""Rescue jax-native files the installed jax refuses: convert them under a jax that reads them.

From jax 0.11.1 on, ``jax.export.deserialize`` refuses exports older than its 6-month window
(``jaxport/_window.py``), and any jax refuses a serialization version it does not know. A
jax-native ``Exported.serialize()`` file is then rescued by reading it with a jax release
that still can, in the managed environment ``$JAXPORT_HOME/envs/jax-RELEASE``
(``audit/_envs.py``, made once), and writing a jaxport archive there: jaxport reads its own
format with its own decoder, so the archive loads under every later jax.

The child (``jaxport/_rescue_child.py``) also runs the function once, on deterministic
inputs, and records inputs and outputs as a golden example beside the archive
(``ARCHIVE.examples.npz``): pushed with the archive (``Registry.push(..., examples=...)``,
``jaxport rescue --push``), a later ``jaxport audit`` under the current jax proves it computes
the numbers the old jax computed. Data crosses the process boundary only as files (the
archive, an ``.npz`` read with ``allow_pickle=False``, JSON); the child gets the allow-listed
environment (``jaxport/_environ.py``), an address-space limit and a time limit.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from jaxport._errors import (
    CorruptArchiveError,
    InvalidNameError,
    UnsafeArchiveError,
    UnsupportedFeatureError,
)

__all__ = ["DEFAULT_RESCUE_JAX", "RescueReport", "examples_path", "rescue"]

#: The release ``rescue`` reads with by default: the newest one that runs on Python 3.11 and
#: does not enforce the window (it reads every serialization version jax wrote up to it).
DEFAULT_RESCUE_JAX = "0.10.2"
#: The child's address-space limit, bytes (as ``export/_native.py``).
_MEMORY_LIMIT = 16 << 30


@dataclasses.dataclass(frozen=True)
class RescueReport:
    """What ``rescue`` did.

    Attributes:
        source: the jax-native file read.
        archive: the jaxport archive written.
        examples: the golden-examples file written beside it (``examples_path(archive)``),
            or None when the check did not record outputs.
        jax_version: the jax release that read the file (as that interpreter reports it).
        jaxlib_version: its jaxlib.
        python: the interpreter that ran the conversion.
        fun_name: the exported function's name.
        platforms: the platforms it was exported for.
        nr_devices: the devices it was exported for.
        vjp_order: how many VJP orders the file carried (all kept in the archive).
        check: ``"recorded"`` (ran once, inputs and outputs stored), ``"not-run"`` (could not
            run there: ``reason`` says why) or ``"error"`` (jax raised running it: ``reason``).
        reason: why the check is not ``"recorded"``, else None.
        original_writer: what the file says of the jax that wrote it (its format names no
            release: the calling convention version, the releases exporting it, the module's
            StableHLO version); also the archive's ``jaxport.original_writer`` metadata.
        converter: the jax that read the file and wrote the archive (``"jax X (jaxlib Y)"``;
            the archive's header names it as its producer, ``jaxport.rescued_with`` too).
    """

    source: str
    archive: str
    examples: str | None
    jax_version: str
    jaxlib_version: str
    python: str
    fun_name: str
    platforms: tuple[str, ...]
    nr_devices: int
    vjp_order: int
    check: str
    reason: str | None
    original_writer: str = ""
    converter: str = ""

    def golden_examples(self) -> list[Any]:
        """The recorded check as ``[jaxport.Example]`` for ``Registry.push(..., examples=)``
        (flat inputs as positional arguments, flat outputs; empty when none was recorded).

        Raises:
            CorruptArchiveError: the examples file is not a golden-examples blob.
        """
        if self.examples is None:
            return []
        from jaxport.audit import Example, decode_examples

        pairs = decode_examples(Path(self.examples).read_bytes())
        return [Example(tuple(ins), {}, list(outs)) for ins, outs in pairs]


def examples_path(archive: str | os.PathLike[str]) -> str:
    """Where ``rescue`` writes the golden examples of ``archive``: ``ARCHIVE.examples.npz``."""
    return os.fspath(archive) + ".examples.npz"


def rescue(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    jax: str = DEFAULT_RESCUE_JAX,
    python: str | None = None,
    timeout: float = 600.0,
    overwrite: bool = False,
) -> RescueReport:
    """Converts a jax-native ``Exported.serialize()`` file into a jaxport archive, reading it
    with jax release ``jax`` in its managed environment, and records one checked run.

    Args:
        src: the jax-native file (a jaxport archive is refused: it needs no rescue).
        dst: the archive to write; the golden examples go to ``examples_path(dst)``.
        jax: the jax release to read it with; its environment
            ``$JAXPORT_HOME/envs/jax-RELEASE`` is made on first use (minutes; network).
        python: an interpreter to use instead of that environment's (it must have jax and
            this jaxport); ``jax`` is then ignored and the report names the jax it has.
        timeout: seconds the conversion and the check may take, together (the environment's
            creation is not counted).
        overwrite: replace ``dst`` and its examples file if they exist.

    Raises:
        FileNotFoundError: ``src`` does not exist.
        FileExistsError: ``dst`` exists and ``overwrite`` is False.
        InvalidNameError: ``src`` is already a jaxport archive, or ``dst`` is ``src``; ``jax``
            is not a release.
        CorruptArchiveError: ``src`` is not a regular file (a FIFO, a device) or over 64 GiB.
        AuditError: the environment for ``jax`` could not be made.
        CorruptArchiveError: that jax's reader refused the bytes.
        UnsupportedFeatureError: jax read them but jaxport cannot store that Exported; or,
            before any child starts, a symbolic dimension over an archive's limits
            (``jaxport.export._internal.symbolic_problem``).
        UnsafeArchiveError: the child crashed, ran out of memory or time.
    """
    source, target = Path(src), Path(dst)
    from jaxport._files import read_regular
    from jaxport.export._internal import MAGIC

    if target.exists() and source.exists() and target.samefile(source):
        raise InvalidNameError(f"{target} is the file to rescue: write the archive elsewhere (-o)")
    data = read_regular(source, CorruptArchiveError)  # a regular file of at most 64 GiB

    if data.startswith(MAGIC):
        raise InvalidNameError(f"{source} is already a jaxport archive: nothing to rescue")
    from jaxport.export._internal import symbolic_problem

    problem = symbolic_problem(data)  # jax's parser takes minutes on a long dimension
    if problem is not None:
        raise UnsupportedFeatureError(
            f"{source} cannot be stored as a jaxport archive: {problem}; refused before jax "
            "parsed it"
        )
    if (target.exists() or Path(examples_path(target)).exists()) and not overwrite:
        raise FileExistsError(f"{target} exists: pass overwrite=True (--force) to replace it")
    if python is None:
        from jaxport.audit import jax_environment
        from jaxport.registry import default_home

        python = jax_environment(jax, default_home())
    with tempfile.TemporaryDirectory(prefix="jaxport-rescue-") as tmp:
        work = Path(tmp)
        (work / "in").write_bytes(data)
        _convert(python, work, timeout, str(source))
        facts = json.loads((work / "facts.json").read_text())
        _check_archive(work / "archive.jaxport", str(source))
        examples = None
        if (work / "examples.npz").exists():
            examples = examples_path(target)
            os.replace(work / "examples.npz", examples)
        else:
            Path(examples_path(target)).unlink(missing_ok=True)  # a stale one would mislead
        os.replace(work / "archive.jaxport", target)
    return _report(facts, str(source), str(target), examples, python)


def _convert(python: str, work: Path, timeout: float, path: str) -> None:
    from jaxport._rescue_child import NOT_NATIVE, NOT_STORABLE
    from jaxport.export._internal import run_converter

    cmd = [python, "-I", "-m", "jaxport._rescue_child", str(work / "in"), str(work)]
    done = run_converter([*cmd, str(_MEMORY_LIMIT)], timeout, lambda what: _unsafe(what, path))
    said = done.stdout.decode(errors="replace").strip()[:500]
    if done.returncode == NOT_NATIVE:
        raise CorruptArchiveError(f"not jax-native bytes this jax reads ({said})", path=path)
    if done.returncode == NOT_STORABLE:
        raise UnsupportedFeatureError(f"jax-native bytes cannot be stored as an archive: {said}")
    if done.returncode != 0:
        from jaxport.export._internal import converter_status

        lines = [ln for ln in done.stderr.decode(errors="replace").splitlines() if ln.strip()]
        tail = f": {lines[-1][:300]}" if lines else ""
        raise _unsafe(f"{converter_status(done.returncode)}{tail}", path)


def _check_archive(archive: Path, path: str) -> None:
    """The child's archive, read back by this jaxport's header reader (a child of another
    release wrote it).

    Raises:
        UnsupportedFeatureError: this jaxport cannot read it.
    """
    from jaxport._errors import JaxportError
    from jaxport.export import inspect

    try:
        inspect(archive)
    except JaxportError as e:
        raise UnsupportedFeatureError(
            f"the archive rescued from {path} is not readable here: {type(e).__name__}: {e}"
        ) from None


def _report(
    facts: dict[str, Any], source: str, archive: str, examples: str | None, python: str
) -> RescueReport:
    return RescueReport(
        source=source,
        archive=archive,
        examples=examples,
        jax_version=str(facts["jax"]),
        jaxlib_version=str(facts["jaxlib"]),
        python=python,
        fun_name=str(facts["fun_name"]),
        platforms=tuple(str(p) for p in facts["platforms"]),
        nr_devices=int(facts["nr_devices"]),
        vjp_order=int(facts["vjp_order"]),
        check=str(facts["check"]),
        reason=None if facts["reason"] is None else str(facts["reason"]),
        original_writer=str(facts.get("original_writer", "")),
        converter=str(facts.get("converter", f"jax {facts['jax']} (jaxlib {facts['jaxlib']})")),
    )


def _unsafe(what: str, path: str) -> UnsafeArchiveError:
    return UnsafeArchiveError(
        f"the rescue of {path} did not finish: {what}; nothing was parsed in this process",
        targets=(),
        vjp_order=0,
        path=path,
    )
