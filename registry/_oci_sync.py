"""One name's repository of OCI content brought into a registry: every version tag (``vN``)
and every alias tag, read and checked (``import_repository``), every archive the registry
lacks assembled and verified and every referrer checked (``RepositoryImport.stage``), and
only then pushed (``commit``). A version the registry holds already (the same archives, in
order, under the name) is not pushed again, its signatures and findings are still adopted
(counted only where new), and each alias tag moves the alias to the version its index is.
"""

from __future__ import annotations

import dataclasses
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from jaxport import NotFoundError
from jaxport.registry._names import parse_reference
from jaxport.registry._oci_mapping import (
    OciVersion,
    adopt_attached,
    assemble,
    read_attached,
    read_version,
)
from jaxport.registry._oci_media import sha256_of
from jaxport.registry._oci_referrers import Attached
from jaxport.registry._oci_report import CopyReport
from jaxport.registry._oci_target import OciTarget

if TYPE_CHECKING:
    from jaxport.registry._registry import Registry
    from jaxport.registry._types import Ref

__all__ = ["RepositoryImport", "held_versions", "import_repository", "versions_of"]

_VERSION_TAG = re.compile(r"v([0-9]+)")


@dataclasses.dataclass
class _Staged:
    """A version ready to push: its archives assembled and verified (``paths``; None where
    the registry holds the version already, as ``number``) and its referrers checked."""

    version: OciVersion
    paths: list[Path] | None
    number: int | None
    attached: Attached


@dataclasses.dataclass
class RepositoryImport:
    """The versions (by tag, oldest first) and alias tags (alias -> index digest) of one
    repository, read and checked, to push into ``registry``: ``stage`` fetches and verifies
    everything into a directory, ``commit`` then writes (``run`` does both)."""

    target: OciTarget
    registry: Registry
    versions: list[tuple[str, OciVersion]]
    aliases: dict[str, str]
    staged: list[_Staged] = dataclasses.field(default_factory=list)

    def stage(self, directory: Path, report: CopyReport) -> None:
        """Assembles each version the registry lacks into ``directory`` (every layer and the
        whole archive verified) and reads every version's signatures and findings; writes
        nothing to the registry.

        Raises:
            (see ``assemble`` and ``read_attached``)
        """
        for i, (_, version) in enumerate(self.versions):
            held = held_versions(self.registry, version.name)
            number = held.get(tuple(v.digest for v in version.variants))
            paths = None
            if number is None:
                paths = [
                    assemble(self.target, v, directory / f"{i}-{k}.jaxport", report, self.registry)
                    for k, v in enumerate(version.variants)
                ]
            attached = read_attached(self.target, version)
            self.staged.append(_Staged(version, paths, number, attached))

    def commit(self, report: CopyReport) -> None:
        """Pushes what ``stage`` assembled, adopts signatures and findings, moves aliases.

        Raises:
            (see ``Registry.push`` and ``Registry.alias``)
        """
        by_index: dict[str, tuple[str, int]] = {}
        for item in self.staged:
            version, number = item.version, item.number
            if item.paths is not None:
                result = self.registry.push(item.paths, version.name, metadata=version.metadata)
                number = result.version
                where = f"{result.name}:{number}"
                (report.versions if result.created else report.skipped).append(where)
            else:
                report.skipped.append(f"{version.name}:{number}")
            assert number is not None
            adopt_attached(self.registry, item.attached, f"{version.name}:{number}", report)
            by_index[version.index.digest] = (version.name, number)
        for alias, digest in sorted(self.aliases.items()):
            if digest not in by_index:
                report.notes.append(f"tag {alias}: not the index of a version tag (not set)")
                continue
            name, number = by_index[digest]
            if self.registry.aliases(name).get(alias) != number:
                self.registry.alias(name, alias, number)
                report.aliases.append(f"{name}@{alias}")

    def run(self, report: CopyReport) -> None:
        """``stage`` into a temporary directory, then ``commit``."""
        with tempfile.TemporaryDirectory(prefix="jaxport-oci-") as tmp:
            self.stage(Path(tmp), report)
            self.commit(report)


def import_repository(target: OciTarget, registry: Registry) -> RepositoryImport:
    """Reads every version tag's version (``read_version``) and every other tag's index
    digest (referrers tags ``sha256-...`` left out).

    Raises:
        (see ``read_version``)
    """
    tags = target.tags()
    numbered = sorted((int(m.group(1)), t) for t in tags if (m := _VERSION_TAG.fullmatch(t)))
    versions = [(t, read_version(target, t)) for _, t in numbered]
    aliases = {}
    for tag in tags:
        if _VERSION_TAG.fullmatch(tag) or tag.startswith("sha256-"):
            continue
        aliases[tag] = sha256_of(target.fetch_manifest(tag)[1])
    return RepositoryImport(target, registry, versions, aliases)


def held_versions(registry: Registry, name: str) -> dict[tuple[str, ...], int]:
    """The versions of ``name`` in ``registry`` by their archives' digests, in order (the
    newest where two hold the same); none where the name does not exist."""
    try:
        refs = versions_of(registry, name)
    except NotFoundError:
        return {}
    return {ref.digests: ref.version for ref in refs}


def versions_of(registry: Registry, reference: str) -> list[Ref]:
    """The versions a reference names: every version of a bare ``NAME`` (oldest first), else
    the one ``Registry.get`` gives.

    Raises:
        (see ``Registry.get`` and ``Registry.list``)
    """
    parsed = parse_reference(reference)
    if parsed.name is None or parsed.version is not None or parsed.alias is not None:
        return [registry.get(reference)]
    out: list[Ref] = []
    after = None
    while page := registry.list(parsed.name, limit=1000, after=after):
        out += page
        after = (page[-1].name, page[-1].version)
    return out
