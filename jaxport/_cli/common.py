"""What every command module of the CLI shares: the registry the options name, printing a
result (a rich rendering or one JSON document), and the options several commands take, each
declared once here.

Imports nothing heavy: jax, SQLAlchemy and rich are imported inside the functions that need
them, so a command that does not use them never loads them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from jaxport._errors import InvalidNameError, NotFoundError

__all__ = [
    "CONTEXT",
    "PEM",
    "CliContext",
    "allow_custom_call_option",
    "devices_option",
    "emit",
    "paged",
    "parse_meta",
    "pass_ctx",
    "require_database",
    "resolve_variant",
    "timeout_option",
]

F = TypeVar("F", bound=Callable[..., Any])

#: click's context settings of every group: ``-h`` is ``--help``.
CONTEXT: dict[str, Any] = {"help_option_names": ["-h", "--help"]}
#: An existing PEM file (keys, certificates).
PEM = click.Path(exists=True, dir_okay=False, path_type=Path)


class CliContext:
    """The registry the options and environment name: ``--registry`` else
    ``$JAXPORT_REGISTRY``, ``--blobs`` else ``$JAXPORT_BLOBS``, ``--token`` else
    ``$JAXPORT_TOKEN`` (for a server URL), as ``jaxport.Registry()`` reads them."""

    def __init__(self, url: str | None, blobs: str | None, token: str | None = None):
        self.url, self.blobs, self.token = url, blobs, token

    def registry(self, *, create: bool = False) -> Any:
        """The registry. A command that only reads passes ``create=False``: a SQLite file
        that does not exist is then ``NotFoundError`` naming its absolute path, never created;
        ``push`` and ``token create`` make it.

        Raises:
            NotFoundError: as above.
            InvalidNameError: ``--token`` for a database URL.
            MissingExtraError: a server URL without httpx (``jaxport[client]``).
        """
        from jaxport.registry import Registry
        from jaxport.registry._internal import RegistryConfig, is_server_url

        config = RegistryConfig.from_env()
        url = self.url or config.url
        if is_server_url(url):  # --blobs is refused there: the server has its own store
            return Registry(url, blobs=self.blobs, token=self.token)
        if self.token is not None:
            raise InvalidNameError(
                "--token is for a registry server (an http(s):// --registry or "
                "$JAXPORT_REGISTRY); a database registry takes none"
            )
        if not create:
            require_database(url or config.database_url())
        return Registry(url, blobs=self.blobs)


def require_database(url: str) -> None:
    """Refuses a SQLite URL whose file does not exist (a read must not create one).

    Raises:
        NotFoundError: the file is missing; the message names its absolute path.
    """
    from jaxport.registry._internal import sqlite_file

    path = sqlite_file(url)
    if path is not None and not path.exists():
        raise NotFoundError(
            f"no registry database at {path}: nothing was pushed there yet (jaxport push "
            "creates it), or --registry / $JAXPORT_REGISTRY names another file"
        )


#: Passes the group's ``CliContext`` as a command's first argument.
pass_ctx = click.make_pass_decorator(CliContext)


def emit(as_json: bool, data: Any, render: Callable[[Any], Any]) -> None:
    """Prints ``data``: one JSON document under ``--json``, else ``render(data)`` (a message,
    which the terminal wraps, or a rich rendering, printed ``Trimmed``)."""
    if as_json:
        from jaxport._cli.output import emit_json

        emit_json(data)
        return
    from rich.console import Console

    from jaxport._cli.render import Trimmed

    rendered = render(data)
    if isinstance(rendered, str):  # a message: the terminal wraps it, paths stay whole
        Console(highlight=False, soft_wrap=True).print(rendered)
        return
    Console(highlight=False).print(Trimmed(rendered))


def paged(table: Any, more: str | None) -> Any:
    """``table``, then ``more: OPTION`` naming the next page where there is one."""
    if more is None:
        return table
    from rich.console import Group
    from rich.text import Text

    return Group(table, Text(f"more: {more}"))


def parse_meta(
    ctx: click.Context, param: click.Parameter, pairs: tuple[str, ...]
) -> dict[str, str]:
    """``--meta KEY=VALUE`` pairs as a dict.

    Raises:
        click.BadParameter: a pair without ``=`` or without a key.
    """
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", ctx, param)
        out[key] = value
    return out


allow_custom_call_option = click.option(
    "--allow-custom-call",
    "allow_custom_calls",
    multiple=True,
    metavar="TARGET",
    help="Accept modules that call this custom-call target (repeat), besides those some jax "
    "release since 0.4.30 guarantees stable: only for archives from authors you trust.",
)


def devices_option(text: str) -> Callable[[F], F]:
    """``--devices N`` (N >= 1): a device count."""
    return click.option("--devices", type=click.IntRange(min=1), help=text)


def timeout_option(text: str, *, default: float = 120.0) -> Callable[[F], F]:
    """``--timeout SECONDS`` (> 0; ``default`` seconds): how long a child process may take
    before it is killed. ``run`` and ``rescue`` take 600 s, the audits and ``verify`` 120 s (a
    hanging module is stopped sooner, by the module sandbox)."""
    return click.option(
        "--timeout",
        type=click.FloatRange(min=0, min_open=True),
        default=default,
        show_default=True,
        metavar="SECONDS",
        help=text,
    )


def resolve_variant(reg: Any, reference: str, platform: str | None, devices: int | None) -> Any:
    """The variant ``pull`` and ``run`` choose (``Registry.resolve``), for its name and version.

    Raises:
        NotFoundError: no variant fits; the message says what exists.
    """
    kwargs: dict[str, Any] = {"nr_devices": devices}
    if platform is not None:
        kwargs["platform"] = platform
    chosen = reg.resolve(reference, **kwargs).chosen
    if chosen is None:
        reg.pull_bytes(reference, **kwargs)  # raises the NotFoundError saying what exists
    return chosen
