"""``jaxport alias``: move, remove or list aliases (``alias NAME [ALIAS [VERSION]]``), and
protect them with gates (``alias protect``, ``alias unprotect``).

A click group that dispatches on its first argument: ``protect`` and ``unprotect`` are its
subcommands; anything else is the move form of earlier releases (the group's hidden command
``MOVE``), so ``jaxport alias NAME ALIAS VERSION`` keeps working. A name spelled like a
subcommand is reached through the hidden command: ``jaxport alias _move protect prod 3``.
"""

from __future__ import annotations

from typing import Any

import click

from jaxport._cli.common import CONTEXT, CliContext, emit, pass_ctx
from jaxport._cli.output import json_option

__all__ = ["MOVE", "alias", "move", "protect", "unprotect"]

#: The hidden command that ``jaxport alias NAME ...`` runs; not a registry name (those start
#: with a letter or digit), so no name is mistaken for it.
MOVE = "_move"


class _AliasGroup(click.Group):
    """``jaxport alias``: ``protect``/``unprotect``, else the move form."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        help_names = set(ctx.help_option_names)
        if args and (args[0] in self.commands or args[0] in help_names):
            return super().parse_args(ctx, args)
        return super().parse_args(ctx, [MOVE, *args])


class _MoveContext(click.Context):
    """The move form's context: its usage and hints name ``jaxport alias``, as it is typed."""

    @property
    def command_path(self) -> str:
        return self.parent.command_path if self.parent is not None else super().command_path


class _MoveCommand(click.Command):
    context_class = _MoveContext


@click.group(cls=_AliasGroup, context_settings=CONTEXT)
def alias() -> None:
    """Move, remove or list aliases; protect them with gates.

    \b
    jaxport alias NAME ALIAS VERSION     point NAME@ALIAS at VERSION
    jaxport alias NAME ALIAS --remove    remove NAME@ALIAS
    jaxport alias NAME                   where its aliases point, gates, moves
    jaxport alias protect NAME ALIAS ... gate the moves of NAME@ALIAS (admin)
    jaxport alias unprotect NAME ALIAS   remove its gates (admin)

    A move of a protected alias to a version that fails a gate exits 1 listing every failed
    gate; an admin (through a server: one without name prefixes) may --override --reason.
    """


@alias.command(MOVE, cls=_MoveCommand, hidden=True)
@click.argument("name")
@click.argument("alias_name", metavar="ALIAS", required=False)
@click.argument("version", type=click.IntRange(min=1), required=False)
@click.option("--remove", is_flag=True, help="Remove NAME@ALIAS.")
@click.option(
    "--override",
    is_flag=True,
    help="Move a protected alias although the version fails its gates (needs --reason; an "
    "admin without name prefixes). The event records the reason and the failed gates.",
)
@click.option("--reason", metavar="TEXT", help="Why the gates are overridden (with --override).")
@json_option
@pass_ctx
def move(
    ctx: CliContext,
    name: str,
    alias_name: str | None,
    version: int | None,
    remove: bool,
    override: bool,
    reason: str | None,
    as_json: bool,
) -> None:
    """Move, remove or list aliases.

    NAME ALIAS VERSION points NAME@ALIAS at VERSION; NAME ALIAS --remove removes it; NAME
    alone lists where each alias points, its gates, and every move it made.
    """
    if alias_name is None:
        with ctx.registry() as reg:
            data = {"name": name, "aliases": reg.aliases(name), "history": reg.alias_history(name),
                    "gates": reg.gates(name)}  # fmt: skip
        from jaxport._cli.render import alias_tables
        from jaxport._cli.render_gates import with_gates

        emit(as_json, data, lambda d: with_gates(alias_tables(d), d["gates"]))
        return
    if (version is None) != remove:
        raise click.UsageError("give NAME ALIAS VERSION, or NAME ALIAS --remove")
    if override and not reason:
        raise click.UsageError("--override needs --reason TEXT (the event records it)")
    if reason and not override:
        raise click.UsageError("--reason goes with --override")
    if override and remove:
        raise click.UsageError("removing an alias is not gated: --override goes with a move")
    with ctx.registry() as reg:
        reg.alias(name, alias_name, version, override=override, reason=reason)
        check = reg.check_gates(name, alias_name, version) if override and version else None
    note = ""
    if override:  # say what the override did: a move past failed gates, or nothing
        unused = "not protected" if check is None else "its gates pass"
        note = (
            " (gates overridden)"
            if check and not check.passed
            else f" (--override unused: {unused})"
        )
    moved = {"name": name, "alias": alias_name, "version": version, "override": override}
    emit(as_json, moved, lambda m: f"{name}@{alias_name} -> {version or 'removed'}{note}")


@alias.command()
@click.argument("name")
@click.argument("alias_name", metavar="ALIAS")
@click.option(
    "--require-signature",
    metavar="FINGERPRINT|KEY.pub",
    help="Every variant signed by this signer: its fingerprint (64 hex digits, as `jaxport "
    "show` lists signatures) or its PEM public key or certificate file.",
)
@click.option(
    "--require-audit",
    type=click.Choice(["ok"]),
    help="Each --platforms x --jax target needs a variant whose newest stored finding is ok.",
)
@click.option(
    "--jax",
    "jax_releases",
    metavar="R1,R2",
    default="",
    help="jax releases of --require-audit, comma-separated (default: any release).",
)
@click.option(
    "--platforms",
    metavar="P1,P2",
    default="",
    help="Platforms of --require-audit, comma-separated (default: every platform of the version).",
)
@click.option("--require-goldens", is_flag=True, help="The version holds golden examples.")
@json_option
@pass_ctx
def protect(
    ctx: CliContext,
    name: str,
    alias_name: str,
    require_signature: str | None,
    require_audit: str | None,
    jax_releases: str,
    platforms: str,
    require_goldens: bool,
    as_json: bool,
) -> None:
    """Protect NAME@ALIAS: its moves must pass these gates (an admin; through a server, one
    without name prefixes).

    Gates are read from what the registry stores (findings of `jaxport audit`, signatures of
    `jaxport sign`, golden examples); nothing is compiled. Protecting again replaces them.
    """
    if (jax_releases.strip(", ") or platforms.strip(", ")) and not require_audit:
        raise click.UsageError("--jax and --platforms are targets of --require-audit ok: give it")
    with ctx.registry() as reg:
        gates = reg.protect(
            name, alias_name, require_signature=require_signature, require_audit=require_audit,
            jax=jax_releases, platforms=platforms, require_goldens=require_goldens,
        )  # fmt: skip
        unset = alias_name not in reg.aliases(name)
    from jaxport._cli.wrap import fit

    def said(g: Any) -> str:
        text = fit(f"protected {name}@{alias_name}: " + "; ".join(g.describe()))
        if unset:  # protecting ahead of the first move is allowed; a typo shows here
            text += f"\n{name}@{alias_name} points at no version yet: its first move is gated"
        return text

    emit(as_json, gates, said)


@alias.command()
@click.argument("name")
@click.argument("alias_name", metavar="ALIAS")
@json_option
@pass_ctx
def unprotect(ctx: CliContext, name: str, alias_name: str, as_json: bool) -> None:
    """Remove the gates of NAME@ALIAS (an admin; through a server, one without prefixes)."""
    with ctx.registry() as reg:
        reg.unprotect(name, alias_name)
    emit(as_json, {"name": name, "alias": alias_name}, lambda _: f"unprotected {name}@{alias_name}")
