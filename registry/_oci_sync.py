"""One name's repository of OCI content brought into a registry: every version tag (``vN``)
and every alias tag, read and checked first (``import_repository``), then pushed
(``RepositoryImport.run``). A version the registry holds already (the same archives, in
order, under the name) is not pushed again, its signatures and findings are still adopted
(counted only where new), and each alias tag moves the alias to the version its index is.
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING

from jaxport import NotFoundError
from jaxport.registry._names import parse_reference
from jaxport.registry._oci_mapping import (
    OciVersion,
    adopt_attached,
    pull_version,
    read_attached,
    read_version,
)
from jaxport.registry._oci_media import sha256_of
from jaxport.registry._oci_report import CopyReport
from jaxport.registry._oci_target import OciTarget

if TYPE_CHECKING:
    from jaxport.registry._registry import Registry
    from jaxport.registry._types import Ref

__all__ = ["RepositoryImport", "held_versions", "import_repository", "versions_of"]

_VERSION_TAG = re.compile(r"v([0-9]+)")


@dataclasses.dataclass
class RepositoryImport:
    """The versions (by tag, oldest first) and alias tags (alias -> index digest) of one
    repository, read and checked, to push into ``registry``."""

    target: OciTarget
    registry: Registry
    versions: list[tuple[str, OciVersion]]
    aliases: dict[str, str]

    def run(self, report: CopyReport) -> None:
        """Pushes what is not held yet, adopts signatures and findings, moves aliases.

        Raises:
            (see ``pull_version`` and ``Registry.alias``)
        """
        by_index: dict[str, tuple[str, int]] = {}
        for tag, version in self.versions:
            held = held_versions(self.registry, version.name)
            number = held.get(tuple(v.digest for v in version.variants))
            if number is None:
                result = pull_version(self.target, tag, self.registry, report, version=version)
                number = result.version
            else:
                report.skipped.append(f"{version.name}:{number}")
                attached = read_attached(self.target, version)
                adopt_attached(self.registry, attached, f"{version.name}:{number}", report)
            by_index[version.index.digest] = (version.name, number)
        for alias, digest in sorted(self.aliases.items()):
            if digest not in by_index:
                report.notes.append(f"tag {alias}: not the index of a version tag (not set)")
                continue
            name, number = by_index[digest]
            if self.registry.aliases(name).get(alias) != number:
                self.registry.alias(name, alias, number)
                report.aliases.append(f"{name}@{alias}")


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
