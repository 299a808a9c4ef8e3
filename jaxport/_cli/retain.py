"""``jaxport retain`` (a run, or ``--dry-run``), ``retain policy set|ls|rm`` and ``jaxport
restore``: retention (``Registry.retain``, ``registry/_retention.py``). Through a registry
server they need an admin token; a prefix-limited one reaches only its prefixes."""

from __future__ import annotations

from typing import Any

import click

from jaxport._cli.common import CONTEXT, CliContext, emit, pass_ctx
from jaxport._cli.output import json_option

__all__ = ["restore", "retain"]

_PERIOD_HELP = "How long a deleted version stays restorable: 14d, 12h, 90m or seconds."


def _duration(ctx: click.Context, param: click.Parameter, text: str | None) -> float | None:
    if text is None:
        return None
    from jaxport._errors import InvalidNameError
    from jaxport.registry._internal import parse_duration

    try:
        return parse_duration(text)
    except InvalidNameError as e:
        raise click.BadParameter(str(e)) from None


@click.group(context_settings=CONTEXT, invoke_without_command=True)
@click.option("--prefix", metavar="PREFIX", help="Only the names starting with PREFIX.")
@click.option("--dry-run", is_flag=True, help="Only list what would be deleted, and why.")
@click.option("-v", "--verbose", is_flag=True, help="Also list what is kept, by which rule.")
@json_option
@click.pass_context
def retain(
    click_ctx: click.Context, prefix: str | None, dry_run: bool, verbose: bool, as_json: bool
) -> None:
    """Apply the retention policies: soft-delete each version no rule keeps.

    A deleted version is hidden from every read; `jaxport restore NAME:VERSION` brings it
    back within its policy's restore period, after which gc removes it and frees its blobs.
    Policies: `jaxport retain policy set|ls|rm`; with none (or none for --prefix) it
    exits 1 saying so.
    """
    if click_ctx.invoked_subcommand is not None:
        if prefix is not None or dry_run or verbose or as_json:
            raise click.UsageError("--prefix, --dry-run, -v and --json go after the subcommand")
        return
    ctx = click_ctx.find_object(CliContext)
    assert ctx is not None
    with ctx.registry() as reg:
        _check_a_policy_applies(reg.retention_policies(), prefix)
        plan = reg.retain(prefix, dry_run=dry_run)
    emit(as_json, plan, lambda p: _plan_text(p, verbose))


def _check_a_policy_applies(policies: list[Any], prefix: str | None) -> None:
    """A run that no policy could apply to is a mistake to say, not an empty plan (the
    queue's periodic run, which calls ``Registry.retain`` itself, stays quiet).

    Raises:
        NotFoundError: no policy at all, or none for a name starting with ``prefix``.
    """
    from jaxport._errors import NotFoundError

    if not policies:
        raise NotFoundError(
            "no retention policies, so nothing to apply: set one first "
            "(jaxport retain policy set PREFIX --keep-last N)"
        )
    if prefix is not None and not any(
        p.prefix.startswith(prefix) or prefix.startswith(p.prefix) for p in policies
    ):
        known = ", ".join(repr(p.prefix) for p in policies)
        raise NotFoundError(f"no retention policy applies to names starting with {prefix!r}; "
                            f"policies: {known}")  # fmt: skip


@retain.group("policy", context_settings=CONTEXT)
def policy() -> None:
    """Retention policies per name prefix (the longest matching prefix applies)."""


@policy.command("set")
@click.argument("prefix")
@click.option("--keep-last", type=click.IntRange(min=1), metavar="N", help="Keep the newest N.")
@click.option(
    "--keep-younger",
    callback=_duration,
    metavar="AGE",
    help="Keep versions pushed less than AGE ago: 30d, 12h, 90m or seconds.",
)
@click.option(
    "--keep-ok/--no-keep-ok",
    default=True,
    show_default=True,
    help="Keep the newest version with a full ok audit per platform, device count and "
    "supported jax release.",
)
@click.option("--restore-period", callback=_duration, metavar="AGE", help=_PERIOD_HELP)
@json_option
@pass_ctx
def policy_set(
    ctx: CliContext,
    prefix: str,
    keep_last: int | None,
    keep_younger: float | None,
    keep_ok: bool,
    restore_period: float | None,
    as_json: bool,
) -> None:
    """Set the retention policy of the names starting with PREFIX (aliased versions are
    always kept)."""
    from jaxport.registry._internal import DEFAULT_RESTORE_PERIOD

    period = DEFAULT_RESTORE_PERIOD if restore_period is None else restore_period
    with ctx.registry() as reg:
        stored = reg.set_retention_policy(
            prefix, keep_last=keep_last, keep_younger_than=keep_younger,
            keep_ok_per_target=keep_ok, restore_period=period,
        )  # fmt: skip
    from jaxport._cli.wrap import fit

    emit(as_json, stored, lambda p: fit(f"policy {p.prefix!r}: {_policy_text(p)}"))


@policy.command("ls")
@json_option
@pass_ctx
def policy_ls(ctx: CliContext, as_json: bool) -> None:
    """List the retention policies."""
    with ctx.registry() as reg:
        found = reg.retention_policies()
    emit(as_json, found, _policies_text)


@policy.command("rm")
@click.argument("prefix")
@json_option
@pass_ctx
def policy_rm(ctx: CliContext, prefix: str, as_json: bool) -> None:
    """Remove the retention policy of PREFIX."""
    with ctx.registry() as reg:
        removed = reg.remove_retention_policy(prefix)
    emit(as_json, removed, lambda p: f"removed the policy of {p.prefix!r}")


@click.command(context_settings=CONTEXT)
@click.argument("reference", metavar="NAME:VERSION")
@json_option
@pass_ctx
def restore(ctx: CliContext, reference: str, as_json: bool) -> None:
    """Bring back NAME:VERSION, a version a retention run deleted, within its restore period
    (after it, or once gc purged it, exit 1)."""
    from jaxport.registry import parse_reference

    ref = parse_reference(reference)
    if ref.name is None or ref.version is None:
        raise click.BadParameter("expected NAME:VERSION", param_hint="NAME:VERSION")
    with ctx.registry() as reg:
        restored = reg.restore(ref.name, ref.version)
    emit(as_json, restored, lambda r: f"restored {r.name}:{r.version}")


# -- rendering --------------------------------------------------------------------------------


def _policy_text(p: Any) -> str:
    from jaxport.registry._internal import format_duration

    rules = []
    if p.keep_last is not None:
        rules.append(f"keep last {p.keep_last}")
    if p.keep_younger_than is not None:
        rules.append(f"keep younger than {format_duration(p.keep_younger_than)}")
    if p.keep_ok_per_target:
        rules.append("keep newest ok per target")
    rules.append("keep aliased")
    return ", ".join(rules) + f"; restorable for {format_duration(p.restore_period)}"


def _policies_text(policies: list[Any]) -> str:
    from jaxport._cli.wrap import fit_lines

    if not policies:
        return "no retention policies (jaxport retain policy set PREFIX ...)"
    return fit_lines([f"{p.prefix}  {_policy_text(p)}" for p in policies])


def _plan_text(plan: Any, verbose: bool) -> str:
    from jaxport._cli.render import local_time
    from jaxport._cli.wrap import fit_lines

    verb = "would delete" if plan.dry_run else "deleted"
    names = len({d.name for d in plan.deleted})
    lines = [f"{verb} {len(plan.deleted)} version(s) of {names} name(s)"]
    for d in plan.deleted:
        until = f"; restorable until {local_time(d.restorable_until)}" if not plan.dry_run else ""
        lines.append(f"  {d.name}:{d.version}  ({d.policy}) {'; '.join(d.rules)}{until}")
    more = "" if verbose else " (-v lists them)"
    lines.append(f"kept {len(plan.kept)} version(s){more}")
    if verbose:
        lines += [f"  {d.name}:{d.version}  ({d.policy}) {'; '.join(d.rules)}" for d in plan.kept]
    return fit_lines(lines)
