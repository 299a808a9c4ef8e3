"""The CLI's parts that need no subprocess: the CLI-words table, JSON values, help texts, and
the file mode of ``atomic_write`` (which ``pull`` and the blob store use)."""

from __future__ import annotations

import json
import os
import stat

import click
import pytest

from jaxport._cli.main import main
from jaxport._cli.output import CLI_WORDS, cli_message, error_document, iso_time, to_json
from jaxport._errors import ConflictError
from jaxport._io import atomic_write

# One library message per CLI_WORDS entry, and what the CLI prints instead.
TRANSLATIONS = [
    (
        "m:2 has aliases (prod): move them first, or delete with force=True",
        "m:2 has aliases (prod): move them first, or delete with --force",
    ),
    ("cannot tell the name; pass name= to push", "cannot tell the name; pass --name to push"),
    (
        "a registry on postgresql needs a blob store: pass blobs= (a directory)",
        "a registry on postgresql needs a blob store: pass --blobs (a directory)",
    ),
    (
        "upgrade it with Registry(..., upgrade=True) or `jaxport db upgrade` (back it up first)",
        "upgrade it with `jaxport db upgrade` (back it up first)",
    ),
    (
        "lm:1 is a model: use Registry.pull_model or `jaxport run`, or pull one method with "
        "method= (its archive: Registry.pull_bytes or `jaxport pull`)",
        "lm:1 is a model: use `jaxport run`, or pull one method with --method (its archive: "
        "`jaxport pull`)",
    ),
    (
        "sin:1 is a function, not a model: use Registry.pull (its archive: Registry.pull_bytes "
        "or `jaxport pull`)",
        "sin:1 is a function, not a model: use Registry.pull (its archive: `jaxport pull`)",
    ),
    (
        "a model archive, not a function archive: use jaxport.load_model or `jaxport run`",
        "a model archive, not a function archive: use `jaxport run`",
    ),
]


def test_every_cli_word_has_a_translation_test():
    for pattern, _ in CLI_WORDS:
        assert any(pattern.search(library) for library, _ in TRANSLATIONS), pattern


@pytest.mark.parametrize("library, cli", TRANSLATIONS)
def test_library_words_become_cli_words(library, cli):
    assert cli_message(library) == cli


def test_words_inside_other_words_are_kept():
    assert cli_message("fun_name= and filename=x") == "fun_name= and filename=x"
    # a Python call with no command after it stays: the CLI has no other way
    assert cli_message("use jaxport.load or Registry.pull") == "use jaxport.load or Registry.pull"


def test_error_documents():
    doc = error_document(ConflictError("delete with force=True"))
    assert doc == {"error": {"type": "ConflictError", "message": "delete with --force"}}
    os_error = error_document(FileNotFoundError(2, "No such file or directory", "/x"))
    assert os_error["error"]["message"] == "/x: No such file or directory"


def test_json_times_are_iso_8601_utc():
    assert iso_time(0) == "1970-01-01T00:00:00+00:00"
    data = {"created_at": 86400.5, "moved_at": None, "seconds": 1.5, "rows": [{"x_at": 0}]}
    assert to_json(data) == {
        "created_at": "1970-01-02T00:00:00+00:00",
        "moved_at": None,
        "seconds": 1.5,
        "rows": [{"x_at": "1970-01-01T00:00:00+00:00"}],
    }
    json.dumps(to_json(data))


def _commands(group: click.Group, path: tuple[str, ...] = ()):
    for name, command in group.commands.items():
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))


@pytest.mark.parametrize("path, command", list(_commands(main)), ids=lambda p: str(p))
def test_every_option_and_argument_is_explained(path, command):
    for param in command.params:
        if isinstance(param, click.Option):
            assert param.help, (path, param.name)
        else:  # click arguments have no help: the docstring names each
            assert (param.metavar or param.name.upper()) in (command.help or ""), (path, param)
    assert command.help


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_atomic_write_gives_files_the_umask_mode(tmp_path, umask):
    previous = os.umask(umask)
    try:
        atomic_write(tmp_path / "f", [b"x"])
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "f").stat().st_mode) == 0o666 & ~umask
    assert [p.name for p in tmp_path.iterdir()] == ["f"]  # no temporary file left
