"""Fleet rescue (issue 26 §3): every variant leaving jax's window, or stored with HloSharding-only
shardings, re-exported under a jax release that reads it and pushed as a new version.

``select`` decides from the index alone (no archive read): of each name (under a prefix), its
newest version and every aliased one (an older, unaliased version is history: rescuing it would
make it the newest); of those, each variant (a function's or a model's) whose window
(``jaxport._window``) ends before the date, and each whose shardings are for several devices in
the HloSharding form only (written by jax < 0.9, ``audit/_static.py`` step 5). A candidate the
chosen release cannot help is a refusal with its reason: a producer newer than the release, a
release whose own re-export would expire before the date, HloSharding-only shardings under a
jax >= 0.11.1 (which ignores that form).

``rescue_version`` re-exports the candidates of one version in a child of the release's managed
environment (``registry/_reexport.py``; a model's, ``registry/_reexport_model.py``: its methods'
modules written again, its tensors' stored bytes copied unchanged, so the new archive's tensor
parts are the source's blobs), checks each (the version's goldens, else the re-export against
the source on deterministic inputs: a model's, each method's arguments), and pushes the version
again with the re-exports in place of the candidates (its other variants carried over, byte for
byte; its goldens, or the own check's examples, as the new version's), derived from the source
(``derivation="rescue"``). Then the aliases that pointed at the source move, each only where
its gates pass (a refused move is a refusal). One ``rescue`` event per rescued version records
all of it.
"""

from __future__ import annotations

import dataclasses
import datetime
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jaxport import GateError, JaxportError, PermissionDeniedError, SignatureError
from jaxport._window import jax_window, release_date
from jaxport.registry._types import Ref, VariantInfo

if TYPE_CHECKING:
    from jaxport.registry._registry import Registry

__all__ = [
    "MODEL",
    "RESCUE_DERIVATION",
    "RESCUE_JAX",
    "FleetRescueReport",
    "RescueCandidate",
    "RescueRefusal",
    "RescuedVariant",
    "RescuedVersion",
    "rescue_version",
    "select",
]

#: The release a fleet rescue re-exports with by default: the newest that runs on Python 3.11
#: and reads the HloSharding form (``jaxport.DEFAULT_RESCUE_JAX``, the same; a test pins it).
RESCUE_JAX = "0.10.2"
#: The ``derivation`` of a rescued version, and the kind of its event.
RESCUE_DERIVATION = "rescue"
#: ``VariantInfo.kind`` of a model archive (``registry/_model_parts.MODEL``).
MODEL = "model"
#: The first jax whose Exported has named shardings; the first that ignores the HloSharding form.
_NAMED_SINCE, _HLO_IGNORED_SINCE = "0.9.0", "0.11.1"


@dataclasses.dataclass(frozen=True)
class RescueCandidate:
    """A variant selected for rescue: ``why`` it is (``"expires YYYY-MM-DD"`` and/or
    ``"HloSharding-only"``), ``window_ends`` (None: unknown) and the jax ``release`` it is
    re-exported with."""

    name: str
    version: int
    digest: str
    platforms: tuple[str, ...]
    jax_version: str
    window_ends: str | None
    why: str
    release: str


@dataclasses.dataclass(frozen=True)
class RescueRefusal:
    """Something a rescue did not do, and why: a variant (``digest``), a whole version, or an
    alias move (``alias``: its gates or signature rules refused the rescued version)."""

    name: str
    version: int
    reason: str
    digest: str | None = None
    alias: str | None = None


@dataclasses.dataclass(frozen=True)
class RescuedVariant:
    """One variant re-exported: ``source`` and new ``digest`` (sha256 hex), the jax that wrote
    it, the check (``"golden"`` or ``"own"``) and how many examples it compared, and what was
    done to its modules and shardings."""

    source: str
    digest: str
    jax_version: str
    check: str
    compared: int
    module: str
    shardings: str


@dataclasses.dataclass(frozen=True)
class RescuedVersion:
    """A version rescued: ``source`` (``NAME:V``) and ``rescued`` (``NAME:W``; ``created``
    False when the same content was that version already), its variants re-exported, the
    aliases moved to it and the ``rescue`` event's id (None: not recorded)."""

    name: str
    source: int
    rescued: int
    created: bool
    variants: tuple[RescuedVariant, ...]
    aliases_moved: tuple[str, ...]
    event_id: int | None = None


@dataclasses.dataclass(frozen=True)
class FleetRescueReport:
    """What ``Registry.rescue`` did (or, ``dry_run``, would do).

    Attributes:
        expiring_before: the date (ISO 8601) windows must end before.
        prefix: the name prefix, or None (every name).
        dry_run: nothing was re-exported, pushed or moved.
        candidates: every variant selected, refused ones included.
        rescued: the versions pushed.
        refusals: every refusal with its reason.
        queued: with ``enqueue``, the jobs put on the audit queue (``QueuedRescue``).
    """

    expiring_before: str
    prefix: str | None
    dry_run: bool
    candidates: tuple[RescueCandidate, ...]
    rescued: tuple[RescuedVersion, ...]
    refusals: tuple[RescueRefusal, ...]
    queued: tuple[Any, ...] = ()

    def summary(self) -> str:
        """One line: candidates, versions rescued, aliases moved, refusals, jobs queued."""
        moved = sum(len(r.aliases_moved) for r in self.rescued)
        if self.dry_run:
            refused = {(r.name, r.version, r.digest) for r in self.refusals}
            todo = [c for c in self.candidates if (c.name, c.version, c.digest) not in refused]
            variants, versions = len(todo), len({(c.name, c.version) for c in todo})
        else:
            variants = sum(len(r.variants) for r in self.rescued)
            versions = len(self.rescued)
        verb = "would rescue" if self.dry_run else "rescued"
        return (
            f"{len(self.candidates)} variant(s) expiring before {self.expiring_before} or "
            f"HloSharding-only; {verb} {variants} variant(s) in {versions} version(s); "
            f"{moved} alias(es) moved; {len(self.refusals)} refusal(s); "
            f"{len(self.queued)} job(s) queued"
        )


def select(
    registry: Registry, before: datetime.date, prefix: str | None, release: str
) -> tuple[list[RescueCandidate], list[RescueRefusal]]:
    """The candidates under ``prefix`` (module doc) and the refusals of those ``release``
    cannot help, in name and version order."""
    chosen, refused = [], []
    for name in registry.names():
        if prefix is not None and not name.startswith(prefix):
            continue
        for ref in _wanted_versions(registry, name):
            for v in ref.variants:
                candidate = _candidate(v, before, release)
                if candidate is None:
                    continue
                chosen.append(candidate)
                reason = _cannot_help(v, candidate, before)
                if reason is not None:
                    refused.append(RescueRefusal(v.name, v.version, reason, v.digest))
    return chosen, refused


def _wanted_versions(registry: Registry, name: str) -> list[Ref]:
    """The newest version of ``name`` and every aliased one, in version order."""
    aliases = registry.aliases(name)
    refs = registry.list(name, limit=1_000_000)
    newest = max((r.version for r in refs), default=None)
    wanted = {newest, *aliases.values()}
    return [r for r in refs if r.version in wanted]


def _candidate(v: VariantInfo, before: datetime.date, release: str) -> RescueCandidate | None:
    window = jax_window(v.jax_version, sharded=v.sharded)
    reasons = []
    if window.window_ends is not None and window.window_ends < before.isoformat():
        reasons.append(f"expires {window.window_ends}")
    if hlo_only(v):
        reasons.append("HloSharding-only")
    if not reasons:
        return None
    return RescueCandidate(
        v.name, v.version, v.digest, v.platforms, v.jax_version, window.window_ends,
        " and ".join(reasons), release,
    )  # fmt: skip


def hlo_only(v: VariantInfo) -> bool:
    """Whether a variant's shardings, for several devices, are in the HloSharding form only:
    written by jax < 0.9 (the rule of ``audit/_static.py``, from the indexed facts)."""
    return (
        v.sharded
        and v.nr_devices > 1
        and v.jax_version[:1].isdigit()
        and _key(v.jax_version) < _key(_NAMED_SINCE)
    )


def _cannot_help(v: VariantInfo, c: RescueCandidate, before: datetime.date) -> str | None:
    """Why re-exporting ``v`` with ``c.release`` is refused before it starts, else None."""
    if v.jax_version[:1].isdigit() and _key(v.jax_version) > _key(c.release):
        return (
            f"written by jax {v.jax_version}, newer than the rescue's jax {c.release}: rescue "
            "with a release at least as new (--jax)"
        )
    if hlo_only(v) and _key(c.release) >= _key(_HLO_IGNORED_SINCE):
        return (
            f"HloSharding-only shardings: jax {c.release} ignores that form; rescue with a jax "
            f"older than {_HLO_IGNORED_SINCE} (--jax 0.10.2)"
        )
    ends = jax_window(c.release, sharded=v.sharded).window_ends
    if release_date(c.release) is not None and ends is not None and ends < before.isoformat():
        return (
            f"a re-export by jax {c.release} would expire {ends}, before {before.isoformat()}: "
            "rescue with a newer release (--jax)"
        )
    return None


def rescue_version(
    registry: Registry,
    ref: Ref,
    candidates: Sequence[RescueCandidate],
    python: Callable[[str], str],
    timeout: float,
    *,
    base: Ref | None = None,
) -> tuple[RescuedVersion | None, list[RescueRefusal]]:
    """Re-exports ``candidates`` (variants of ``ref``), pushes the version again with them and
    moves its aliases (module doc). A variant that fails leaves the version as it was: the
    refusals say why.

    Args:
        python: the interpreter of a release's managed environment (``jax_environment``), or
            of the environment a caller injects.
        timeout: seconds each re-export may take.
        base: an earlier rescue of ``ref`` to build on (a queued job rescues one variant:
            the next job of the same version re-exports another of this one's, still
            carried over); the new version still derives from ``ref``.
    """
    carried = base or ref
    with tempfile.TemporaryDirectory(prefix="jaxport-rescue-") as tmp:
        found = _reexport_all(registry, ref, carried, candidates, python, timeout, Path(tmp))
        sources, done, refusals, examples, allowed = found
        if refusals:
            return None, refusals
        pushed = _push(registry, ref, sources, examples, allowed)
    moved, refused = _move_aliases(registry, ref, pushed.version, {ref.version, carried.version})
    rescued = RescuedVersion(ref.name, ref.version, pushed.version, pushed.created, tuple(done),
                             tuple(moved))  # fmt: skip
    event = registry._backend.record_event(
        RESCUE_DERIVATION, ref.name, pushed.version, event_detail(rescued, refused)
    )
    return dataclasses.replace(rescued, event_id=event.id), refused


def _reexport_all(
    registry: Registry,
    ref: Ref,
    carried: Ref,
    candidates: Sequence[RescueCandidate],
    python: Callable[[str], str],
    timeout: float,
    tmp: Path,
) -> tuple[list[bytes | Path], list[RescuedVariant], list[RescueRefusal], Any, list[str]]:
    """The variants of ``carried`` for the new version (the candidates re-exported, the others
    as stored; a model's as a file in ``tmp``, written part by part), what was done, the
    refusals, the new version's examples and the custom calls admitted."""
    from jaxport.registry._golden import examples_from_blob

    wanted = {c.digest: c for c in candidates}
    golden = registry._backend.examples_of(ref.name, ref.version)
    sources: list[bytes | Path] = []
    done: list[RescuedVariant] = []
    refusals: list[RescueRefusal] = []
    recorded: bytes | None = None
    allowed = sorted({t for v in carried.variants for t in v.custom_call_targets})
    for i, v in enumerate(carried.variants):
        data: bytes | Path
        if v.kind == MODEL:
            data = tmp / f"{i}.jaxport"
            registry._backend.write_file(str(carried), v, data)
        else:
            data = registry._backend.archive(str(carried), v)
        c = wanted.get(v.digest)
        if c is None:
            sources.append(data)
            continue
        try:
            result = _reexport(data, v, python(c.release), golden, allowed, timeout, tmp)
        except JaxportError as e:
            refusals.append(_refusal(ref, v, f"{type(e).__name__}: {e}"))
            continue
        if not result.passed:
            refusals.append(_refusal(ref, v, f"check {result.check}: {result.reason}"))
            continue
        sources.append(result.archive)
        recorded = recorded or result.examples
        done.append(_rescued(v, result))
    kind = MODEL if any(v.kind == MODEL for v in carried.variants) else "function"
    blob = golden if golden is not None else recorded
    examples = None if blob is None else examples_from_blob(kind, blob)
    return sources, done, refusals, examples, allowed


def _reexport(
    data: bytes | Path,
    v: VariantInfo,
    python: str,
    golden: bytes | None,
    allowed: Sequence[str],
    timeout: float,
    tmp: Path,
) -> Any:
    """``reexport`` of a function's bytes, ``reexport_model`` of a model's file."""
    from jaxport.registry._reexport import reexport
    from jaxport.registry._reexport_model import reexport_model

    if isinstance(data, Path):
        return reexport_model(
            data, directory=tmp, source_digest=v.digest, python=python, golden=golden,
            allow_custom_calls=allowed, timeout=timeout,
        )  # fmt: skip
    return reexport(
        data, source_digest=v.digest, python=python, golden=golden, allow_custom_calls=allowed,
        timeout=timeout,
    )  # fmt: skip


def _refusal(ref: Ref, v: VariantInfo, reason: str) -> RescueRefusal:
    return RescueRefusal(ref.name, ref.version, reason[:600], v.digest)


def _rescued(v: VariantInfo, result: Any) -> RescuedVariant:
    import hashlib

    digest = getattr(result, "digest", None) or hashlib.sha256(result.archive).hexdigest()
    return RescuedVariant(v.digest, digest, result.jax_version, result.check, result.compared,
                          result.module, result.shardings)  # fmt: skip


def _push(
    registry: Registry, ref: Ref, sources: list[bytes | Path], examples: Any, allowed: list[str]
) -> Any:
    """The version pushed again, derived from ``ref`` (lineage: ``derivation="rescue"``)."""
    return registry.push(
        sources, ref.name, metadata=ref.metadata, examples=examples,
        allow_custom_calls=allowed, derived_from=str(ref), derivation=RESCUE_DERIVATION,
    )  # fmt: skip


def _move_aliases(
    registry: Registry, ref: Ref, version: int, sources: set[int]
) -> tuple[list[str], list[Any]]:
    """Moves the aliases that point at one of ``sources`` (versions of ``ref``'s name) to
    ``version``, each where its gates (and the signature policy) let it; the refused moves,
    with their reasons."""
    refused_as = gate_refusals()
    moved, refused = [], []
    for alias, at in sorted(registry.aliases(ref.name).items()):
        if at not in sources or at == version:
            continue
        try:
            registry.alias(ref.name, alias, version)
        except refused_as as e:
            refused.append(RescueRefusal(ref.name, ref.version, f"{type(e).__name__}: {e}",
                                         alias=alias))  # fmt: skip
        else:
            moved.append(alias)
    return moved, refused


def gate_refusals() -> tuple[type[Exception], ...]:
    """The errors that refuse an alias move: ``GateError`` (a protected alias's gates),
    ``SignatureError`` (a signature rule) and ``PermissionDeniedError`` (a server's token)."""
    return (GateError, SignatureError, PermissionDeniedError)


def event_detail(rescued: RescuedVersion, refused: Sequence[RescueRefusal]) -> dict[str, Any]:
    """The ``rescue`` event's detail: source, whether a version was created, each variant's
    source and new digest with the jax and check, aliases moved and refused (with reasons)."""
    return {
        "source": f"{rescued.name}:{rescued.source}",
        "created": rescued.created,
        "variants": [
            {
                "source": v.source,
                "digest": v.digest,
                "jax": v.jax_version,
                "check": v.check,
                "compared": v.compared,
                "module": v.module,
                "shardings": v.shardings,
            }
            for v in rescued.variants
        ],
        "aliases_moved": list(rescued.aliases_moved),
        "aliases_refused": {r.alias: r.reason for r in refused if r.alias},
    }


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else -1 for p in version.split("."))
