"""jax-native ``Exported.serialize()`` bytes -> a jaxport archive, converted in a worker process.

jax documents its own serialized bytes as trusted input: its reader believes declared sizes (a
509 KB file ran for over two minutes) and its MLIR parse of a hostile module crashes (a 3.4 KB
file segfaults). So the conversion runs in a child (``PYTHON -I -m jaxport.export._native IN
OUT MEMORY_LIMIT``) with an address-space limit it sets itself before importing jax, the
allow-listed environment and a time limit; the parent gets the archive's bytes and then reads
them like any other archive (every module through the module sandbox).
"""

from __future__ import annotations

import contextlib
import json
import resource
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jaxport import CorruptArchiveError, UnsafeArchiveError, UnsupportedFeatureError, _children
from jaxport._environ import worker_environment
from jaxport.export._limits import BUDGET_FACTOR, BUDGET_SLACK, MAX_VJP_ORDER

__all__ = [
    "CONVERTED_KEY",
    "MAX_NATIVE_VJP_ORDER",
    "NativeConversion",
    "convert_native",
    "converter_status",
    "default_timeout",
    "read_native",
    "run_converter",
    "symbolic_problem",
]

#: Metadata key of an archive converted from jax-native bytes.
CONVERTED_KEY = "jaxport.converted_from"
#: The most VJP orders read from jax-native bytes (jax's format nests them without a bound):
#: as many as an archive stores.
MAX_NATIVE_VJP_ORDER = MAX_VJP_ORDER
#: The converting child's address-space limit, bytes (jax on CPU needs about 4 GiB of it).
NATIVE_MEMORY_LIMIT = 16 << 30
#: Exit status of the child when jax's reader refused the bytes (not a crash).
_NOT_NATIVE = 3
#: Exit status of the child when jaxport cannot store what jax read (``dumps`` refused it).
_NOT_STORABLE = 4


class NativeConversion:
    """The converted archive and what the conversion saw."""

    def __init__(self, archive: bytes, vjp_order: int, symbolic: bool):
        self.archive = archive
        self.vjp_order = vjp_order
        self.symbolic = symbolic


def convert_native(
    data: bytes,
    *,
    path: str | None = None,
    timeout: float | None = None,
    memory_limit: int = NATIVE_MEMORY_LIMIT,
) -> NativeConversion:
    """Converts jax-native serialized bytes into a jaxport archive in a child process.

    Args:
        data: what ``jax.export.Exported.serialize()`` wrote (with any VJPs it carries, at
            most ``MAX_NATIVE_VJP_ORDER``).
        path: the file, for messages.
        timeout: seconds (default ``default_timeout(len(data))``).
        memory_limit: the child's address-space limit in bytes.

    Raises:
        CorruptArchiveError: jax's reader refused the bytes (not its format).
        UnsupportedFeatureError: jax read them but ``dumps`` cannot store that Exported; or,
            before any child starts, a symbolic dimension over the limits ``dumps`` applies
            (``symbolic_problem``), which jax's parser would take minutes to read.
        UnsafeArchiveError: the child crashed, ran out of memory or time.
    """
    problem = symbolic_problem(data)
    if problem is not None:
        raise UnsupportedFeatureError(
            f"jax-native bytes cannot be stored as a jaxport archive: {problem}; refused "
            "before jax parsed them"
        )
    limit = timeout if timeout is not None else default_timeout(len(data))
    with tempfile.TemporaryDirectory(prefix="jaxport-native-") as tmp:
        src, dst = Path(tmp, "in"), Path(tmp, "out")
        src.write_bytes(data)
        cmd = [sys.executable, "-I", "-m", "jaxport.export._native", str(src), str(dst)]
        done = run_converter([*cmd, str(memory_limit)], limit, lambda what: _unsafe(what, path))
        if done.returncode == _NOT_NATIVE:
            raise CorruptArchiveError(
                f"neither a jaxport archive nor jax-native serialized Exported "
                f"({done.stdout.decode(errors='replace').strip()[:200]})",
                path=path,
            )
        if done.returncode == _NOT_STORABLE:
            raise UnsupportedFeatureError(
                f"jax-native bytes cannot be stored as a jaxport archive: "
                f"{done.stdout.decode(errors='replace').strip()[:500]}"
            )
        if done.returncode != 0:
            raise _unsafe(converter_status(done.returncode), path)
        facts = json.loads(Path(tmp, "facts").read_text())
        return NativeConversion(dst.read_bytes(), int(facts["vjp_order"]), bool(facts["symbolic"]))


def default_timeout(nbytes: int) -> float:
    """Seconds the converter may take on ``nbytes`` bytes: 60 s (jax's import, its reader and
    ``dumps`` of a small file take a few seconds) plus 1 s per 4 MB, which jax's reader and
    zstd need for large constants."""
    return 60.0 + nbytes / 4e6


def symbolic_problem(data: bytes) -> str | None:
    """What makes the symbolic dimensions of jax-native ``data`` unstorable, read from its
    FlatBuffer without jax's parser, or None (also when the bytes are not that FlatBuffer:
    the converter's reader then says so).

    jax parses each dimension's text when it reads the bytes, in time that grows much faster
    than the text (a 500 KB file whose one dimension has 20,000 terms ran for minutes); the
    texts are checked first against the limits a jaxport archive has
    (``_symbolic.expression_problem``: ``MAX_EXPR_CHARS`` characters, ``MAX_EXPR_ATOMS``
    atoms; ``MAX_SYMBOLIC_CHARS`` in all, schema/FORMAT.md "Limits"), which ``dumps`` would
    apply after jax's parse. The work is linear in ``len(data)``: every vector's declared
    length is checked against the bytes before it is walked.
    """
    try:
        texts = _dimension_texts(data)
    except _OverBudget as e:
        return str(e)
    except Exception:  # flatbuffers raises anything on bytes that are not its format
        return None
    from jaxport.export import _limits
    from jaxport.export._symbolic import expression_problem

    symbolic = sorted({t for t in texts if not t.strip().lstrip("-").isdigit()})
    for text in symbolic:
        problem = expression_problem(text)
        if problem is not None:
            return f"symbolic dimension {text[:60]!r}... ({len(text)} characters): {problem}"
    if sum(map(len, symbolic)) > _limits.MAX_SYMBOLIC_CHARS:
        return f"more than {_limits.MAX_SYMBOLIC_CHARS} characters of symbolic dimensions"
    return None


def _dimension_texts(data: bytes) -> list[str]:
    """The dimension texts of every aval of the Exported in ``data`` and its VJPs (at most
    ``MAX_NATIVE_VJP_ORDER``), from jax's own FlatBuffer accessors.

    Raises:
        ValueError: a vector declares more entries than the bytes hold.
        Exception: whatever the accessors raise on bytes that are not that FlatBuffer.
    """
    from jaxport.export._jax import serialization_generated

    ser = serialization_generated()

    buf = bytearray(data)
    budget = BUDGET_FACTOR * len(buf) + BUDGET_SLACK  # shared strings are read once per use
    exp, texts = ser.Exported.GetRootAs(buf, 0), []
    for _ in range(MAX_NATIVE_VJP_ORDER + 1):
        for name in ("UniqueAvals", "InAvals", "OutAvals"):
            count = _bounded(getattr(exp, f"{name}Length", lambda: 0)(), len(buf))
            for i in range(count):
                aval = getattr(exp, name)(i)
                for j in range(_bounded(aval.ShapeLength(), len(buf))):
                    texts.append(aval.Shape(j).decode("utf-8"))
                    budget -= len(texts[-1]) + 4
                    if budget < 0:
                        raise _OverBudget(
                            f"its dimension texts are referred to more than its {len(buf)} "
                            f"bytes allow ({BUDGET_FACTOR}x its size + {BUDGET_SLACK} read)"
                        )
        exp = exp.Vjp()
        if exp is None:
            break
    return texts


class _OverBudget(Exception):
    """The FlatBuffer's dimension texts are shared beyond its size (a problem to report)."""


def _bounded(count: int, nbytes: int) -> int:
    if not 0 <= count <= nbytes // 4:
        raise ValueError(f"a vector of {count} entries in {nbytes} bytes")
    return count


def _unsafe(what: str, path: str | None) -> UnsafeArchiveError:
    return UnsafeArchiveError(
        f"jax's reader could not convert these jax-native bytes safely: {what}; nothing was "
        f"parsed in this process",
        targets=(),
        vjp_order=0,
        path=path,
    )


def run_converter(
    cmd: list[str], timeout: float, unsafe: Callable[[str], UnsafeArchiveError]
) -> subprocess.CompletedProcess[bytes]:
    """``cmd`` run to its end in a child with the allow-listed environment
    (``jaxport._environ``), no stdin and its output captured, for at most ``timeout`` seconds;
    the child dies with this process and has its own deadline (``jaxport._children``).

    Raises:
        UnsafeArchiveError: ``unsafe(what)``: no answer within ``timeout``, or the child could
            not be started.
    """
    try:
        return _children.run(cmd, timeout=timeout, env=worker_environment())
    except subprocess.TimeoutExpired:
        raise unsafe(f"no answer within {timeout:g} s") from None
    except OSError as e:
        raise unsafe(f"{cmd[0]} could not be started ({e.strerror})") from None


def read_native(path: Path) -> tuple[Any, int]:
    """jax's own ``deserialize`` of the bytes at ``path`` (in a child: jax's reader is
    unbounded), and how many VJP orders they hold (at most ``MAX_NATIVE_VJP_ORDER``).

    Raises:
        Exception: whatever jax's reader raises on bytes that are not its format.
    """
    from jax import export as jax_export

    exported = jax_export.deserialize(bytearray(path.read_bytes()))
    order, current = 0, exported
    while order < MAX_NATIVE_VJP_ORDER and current.has_vjp():
        current, order = current.vjp(), order + 1
    return exported, order


def converter_status(code: int) -> str:
    """What a child's exit ``code`` says: the signal that killed it, or its status."""
    import signal

    if code < 0:
        with contextlib.suppress(ValueError):
            return f"the converter was killed by {signal.Signals(-code).name}"
    return f"the converter exited with status {code} (its memory limit, or an internal error)"


def _child(src: str, dst: str, memory_limit: int) -> int:
    resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    from jaxport import JaxportError
    from jaxport.export import dumps

    try:
        exported, order = read_native(Path(src))
    except Exception as e:  # jax's reader raises anything on bytes that are not its format
        print(type(e).__name__)
        return _NOT_NATIVE
    try:
        archive = dumps(exported, vjp_order=order, metadata={CONVERTED_KEY: "jax-native"})
    except JaxportError as e:
        print(f"{type(e).__name__}: {e}")
        return _NOT_STORABLE
    symbolic = any(not isinstance(d, int) for a in exported.in_avals for d in a.shape)
    Path(dst).write_bytes(archive)
    Path(dst).with_name("facts").write_text(json.dumps({"vjp_order": order, "symbolic": symbolic}))
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1], sys.argv[2], int(sys.argv[3])))
