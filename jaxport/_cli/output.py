"""What the CLI prints besides tables: JSON documents, errors in CLI words, and output files.

``--json`` output is one JSON document on stdout; every ``*_at`` field and an event's ``at``
(unix seconds in the API) becomes ISO 8601 in UTC with its offset. Errors go to stderr:
``Type: message``, or under ``--json`` the object ``{"error": {"type": ..., "message": ...}}``.
"""

from __future__ import annotations

import dataclasses
import datetime
import errno
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import click

__all__ = [
    "CLI_WORDS",
    "FUNCTION_ONLY",
    "STDOUT",
    "check_output",
    "cli_message",
    "emit_json",
    "error_document",
    "iso_time",
    "json_option",
    "report_error",
    "to_json",
    "write_output",
]

#: The library's words in messages -> the CLI's (a message says ``force=True``; a CLI user
#: passes ``--force``). Applied to every error message the CLI prints. A message that names
#: what to call where the CLI has a command too names both, the Python call first
#: (``use Registry.pull_model or `jaxport run` ``): the CLI prints the command alone.
CLI_WORDS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bforce=True\b"), "--force"),
    (re.compile(r"\bname=(?=\W|$)"), "--name"),
    (re.compile(r"\bblobs=(?=\W|$)"), "--blobs"),
    (re.compile(r"\bmethod=(?=\W|$)"), "--method"),
    (re.compile(r"\b(?:Registry|jaxport)(?:\.\w+)*(?:\([^()]*\))? or (?=`jaxport )"), ""),
)
#: Fields of ``ArchiveInfo`` and ``VariantInfo`` that describe one exported function: empty in
#: a model's, so its JSON leaves them out (each of its ``methods`` has its own signature).
FUNCTION_ONLY = frozenset(
    {
        "disabled_safety_checks",
        "fun_name",
        "in_avals",
        "in_signature",
        "ordered_effects",
        "out_avals",
        "out_signature",
        "symbolic_constraints",
        "unordered_effects",
        "uses_global_constants",
    }
)
#: The ``-o`` value meaning standard output.
STDOUT = "-"
_PROGRESS_BYTES = 4 * 2**20  # a progress bar for writes above this (when stderr is a terminal)
_CHUNK = 2**20

#: ``--json`` on every command that can print one JSON document (its errors are JSON too).
json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON document on stdout (for scripts)."
)


def cli_message(message: str) -> str:
    """``message`` with the library's parameter names replaced by the CLI's (``CLI_WORDS``)."""
    for pattern, words in CLI_WORDS:
        message = pattern.sub(words, message)
    return message


def error_document(error: BaseException) -> dict[str, dict[str, Any]]:
    """``{"error": {"type": ..., "message": ...}}`` for ``error``, in CLI words; a
    ``GateError`` adds ``failures``: every failed gate as ``{"gate", "reason"}``."""
    if isinstance(error, click.ClickException):
        message = error.format_message()
    elif isinstance(error, OSError) and error.strerror and error.filename:
        message = f"{error.filename}: {error.strerror}"  # not "[Errno 2] ..."
    else:
        message = str(error)
    doc: dict[str, Any] = {"type": type(error).__name__, "message": cli_message(message)}
    failures = getattr(error, "failures", None)
    if isinstance(failures, tuple | list):
        doc["failures"] = [{"gate": str(g), "reason": str(r)} for g, r in failures]
    return {"error": doc}


def report_error(error: BaseException, as_json: bool) -> None:
    """Prints ``error`` on stderr: ``Type: message``, or under ``--json`` a JSON object."""
    doc = error_document(error)["error"]
    if as_json:
        click.echo(json.dumps({"error": doc}), err=True)
    else:
        click.echo(f"{doc['type']}: {doc['message']}", err=True)


def iso_time(seconds: float) -> str:
    """Unix seconds -> ISO 8601 in UTC with its offset, e.g. ``2026-11-22T14:03:07+00:00``."""
    moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)
    return moment.isoformat(timespec="seconds")


def to_json(data: Any) -> Any:
    """``data`` (dataclasses, tuples, dicts, scalars) as plain JSON values; ``*_at``, ``at``
    and ``*_until`` (Unix seconds) -> ISO.

    A model's ``ArchiveInfo`` or ``VariantInfo`` (``kind == "model"``) leaves out the
    ``FUNCTION_ONLY`` fields, which a model leaves empty (its methods have their own).
    """
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        skip = FUNCTION_ONLY if getattr(data, "kind", None) == "model" else frozenset()
        data = {
            f.name: getattr(data, f.name) for f in dataclasses.fields(data) if f.name not in skip
        }
    if isinstance(data, dict):
        return {str(k): _field(str(k), v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [to_json(x) for x in data]
    return data


def _field(key: str, value: Any) -> Any:
    moment = key == "at" or key.endswith(("_at", "_until"))
    if moment and isinstance(value, int | float) and not isinstance(value, bool):
        return iso_time(value)
    return to_json(value)


def emit_json(data: Any) -> None:
    """Prints ``data`` as one JSON document on stdout."""
    click.echo(json.dumps(to_json(data), indent=2, sort_keys=True))


def check_output(path: Path, *, force: bool) -> None:
    """Refuses an output path that cannot or should not be written, before any download.

    Raises:
        IsADirectoryError: ``path`` is a directory.
        FileNotFoundError: its directory does not exist.
        FileExistsError: ``path`` exists and ``force`` is False.
    """
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a directory: give a file name with -o")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"{path.parent} does not exist (the directory of -o {path})")
    if path.exists() and not force:
        raise FileExistsError(f"{path} exists: pass --force to overwrite it")


def _write_all(stream: BinaryIO, data: bytes) -> None:
    """Writes every byte of ``data`` to ``stream``'s file descriptor: a short write (a full
    disk, a reader that went away) is an ``OSError``, never silent truncation.

    (``BufferedWriter.write`` may return a short count without raising.)
    """
    stream.flush()
    fd, view = stream.fileno(), memoryview(data)
    while view:
        written = os.write(fd, view[: 1 << 20])
        if written <= 0:
            raise OSError(errno.EIO, "standard output accepts no more bytes")
        view = view[written:]


def write_output(path: Path | str, data: bytes) -> None:
    """Writes ``data`` to ``path`` atomically (``STDOUT``: binary standard output).

    A progress bar shows on stderr for large files when stderr is a terminal.

    Raises:
        OSError: the file cannot be written.
    """
    if path == STDOUT:
        _write_all(sys.stdout.buffer, data)
        return
    from jaxport._io import atomic_write

    if len(data) < _PROGRESS_BYTES or not sys.stderr.isatty():
        atomic_write(path, [data])
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(f"writing {Path(path).name}", total=len(data))

        def chunks() -> Iterator[bytes]:
            for i in range(0, len(data), _CHUNK):
                yield data[i : i + _CHUNK]
                progress.advance(task, min(_CHUNK, len(data) - i))

        atomic_write(path, chunks())
