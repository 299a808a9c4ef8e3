"""``mirror``: versions, aliases, signatures and findings copied from one place to another, by
digest, only what the destination lacks.

A place is a ``Registry`` (a database, or a registry server) or an ``OciStore``: an OCI image
layout directory (``OciLayout``) or a namespace of an OCI registry (``OciNamespace``,
``oci://HOST/NAMESPACE``: name ``N`` is the repository ``NAMESPACE/N``). Each version is
copied whole or not at all, oldest first; what a copy finds at the destination already (a
version with the same archives, a blob, a manifest, a signature, a finding, an alias where it
points already) it does not copy again, so a mirror that was interrupted continues where it
stopped, and a second run copies nothing (its ``CopyReport`` counts zero). A registry
numbers the versions it receives itself: a version keeps its number where the destination's
numbering agrees (an empty one, mirrored oldest first, with no deleted version between); an
OCI destination keeps the source's numbers as tags ``vN``. Between two OCI places the content
is copied as it is (``_oci_copy``).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from jaxport import InvalidNameError, UnsupportedFeatureError
from jaxport.registry._oci_copy import copy_repository
from jaxport.registry._oci_mapping import adopt_attached, push_version, registry_attached
from jaxport.registry._oci_report import CopyReport
from jaxport.registry._oci_sync import held_versions, import_repository, versions_of
from jaxport.registry._oci_target import OciTarget

if TYPE_CHECKING:
    from jaxport.registry._registry import Registry
    from jaxport.registry._types import Ref

__all__ = ["OciNamespace", "OciStore", "mirror", "open_place"]


class OciStore(Protocol):
    """Where OCI content for many names lives: one ``OciTarget`` per name."""

    def repository(self, name: str) -> OciTarget:
        """The target of ``name``."""
        ...

    def names(self) -> list[str]:
        """The names it holds (raises ``UnsupportedFeatureError`` where it cannot list them)."""
        ...


class OciNamespace:
    """``oci://HOST/NAMESPACE`` of an OCI registry: name ``N`` is ``NAMESPACE/N``
    (``registry/_oci_client.OciRepository``). It cannot list its names (the distribution
    catalog is optional, and off on most registries): give them (``names``).

    Raises:
        InvalidNameError: a malformed URL.
    """

    def __init__(self, url: str, names: Sequence[str] = ()) -> None:
        if not url.startswith("oci://") or url.rstrip("/").count("/") < 2:
            raise InvalidNameError(f"an OCI namespace is oci://HOST/NAMESPACE, got {url!r:.120}")
        self.url = url.rstrip("/")
        self._names = list(names)

    def repository(self, name: str) -> OciTarget:
        from jaxport.registry._oci_client import OciRepository

        return OciRepository(f"{self.url}/{name}")

    def names(self) -> list[str]:
        if not self._names:
            raise UnsupportedFeatureError(
                f"{self.url}: an OCI registry does not list its repositories: name them "
                "(--name, or names=)"
            )
        return list(self._names)


Place = Any  # a Registry or an OciStore


def open_place(
    url: str, *, create: bool = False, blobs: str | None = None, names: Sequence[str] = ()
) -> Place:
    """The place ``url`` names: ``oci://HOST/NAMESPACE`` an OCI registry's namespace,
    ``oci:DIR`` an image layout directory (made if ``create``), anything else a registry URL
    (a database, with ``blobs``, or a registry server).

    Raises:
        InvalidNameError: a malformed URL; ``oci:DIR`` that does not exist, not ``create``.
        (and see ``Registry``)
    """
    if url.startswith("oci://"):
        return OciNamespace(url, names)
    if url.startswith("oci:"):
        from jaxport.registry._oci_layout import OciLayout

        root = Path(url[4:])
        if not create and not root.joinpath("oci-layout").is_file():
            raise InvalidNameError(f"{root} is not an OCI image layout (no oci-layout file)")
        return OciLayout(root)
    from jaxport.registry._registry import Registry

    return Registry(url, blobs=blobs)


def mirror(
    source: Place, destination: Place, *, prefix: str | None = None, names: Sequence[str] = ()
) -> CopyReport:
    """Copies every version of every name starting with ``prefix`` (or of ``names``) from
    ``source`` to ``destination`` (see the module docstring), with their aliases,
    signatures and findings.

    Args:
        source, destination: a ``Registry`` or an ``OciStore`` each, or the URL of one:
            ``oci://HOST/NAMESPACE`` (an OCI registry), ``oci:DIR`` (an image layout
            directory, made where it is the destination), else a registry URL.
        prefix: only the names that start with it.
        names: only these names (an OCI registry as the source needs them).

    Returns:
        What was copied (``CopyReport``).

    Raises:
        UnsupportedFeatureError: an OCI registry as the source without ``names``.
        (and see ``Registry.push``, ``Registry.alias`` and the ``OciTarget``)
    """
    if isinstance(source, str):
        source = open_place(source, names=names)
    if isinstance(destination, str):
        destination = open_place(destination, create=True)
    report = CopyReport()
    src_oci, dst_oci = not _is_registry(source), not _is_registry(destination)
    for name in _names(source, prefix, names):
        if src_oci and dst_oci:
            with _opened(source.repository(name)) as a, _opened(destination.repository(name)) as b:
                copy_repository(a, b, name, report)
        elif src_oci:
            with _opened(source.repository(name)) as target:
                import_repository(target, destination).run(report)
        elif dst_oci:
            with _opened(destination.repository(name)) as target:
                for ref in versions_of(source, name):
                    push_version(source, str(ref), target, report)
        else:
            _between_registries(source, destination, name, report)
    return report


@contextlib.contextmanager
def _opened(target: OciTarget) -> Iterator[OciTarget]:
    """``target``, closed at the end where it holds connections (an OCI registry's)."""
    try:
        yield target
    finally:
        close = getattr(target, "close", None)
        if close is not None:
            close()


def _is_registry(place: Place) -> bool:
    from jaxport.registry._registry import Registry

    return isinstance(place, Registry)


def _names(source: Place, prefix: str | None, names: Sequence[str]) -> list[str]:
    found = list(names) if names else list(source.names())
    return sorted(n for n in found if prefix is None or n.startswith(prefix))


def _between_registries(src: Registry, dst: Registry, name: str, report: CopyReport) -> None:
    """One name's versions from registry to registry: each archive pulled and pushed (the
    destination stores only the parts it lacks), signatures and findings adopted, aliases
    moved to the destination's version of the same archives."""
    numbers: dict[int, int] = {}
    for ref in versions_of(src, name):
        held = held_versions(dst, name)
        number = held.get(ref.digests)
        if number is None:
            number = _copy_version(src, dst, ref, report)
        else:
            report.skipped.append(f"{name}:{number}")
        numbers[ref.version] = number
        adopt_attached(dst, registry_attached(src, ref), f"{name}:{number}", report)
    current = dst.aliases(name) if numbers else {}
    for alias, version in sorted(src.aliases(name).items()):
        if version in numbers and current.get(alias) != numbers[version]:
            dst.alias(name, alias, numbers[version])
            report.aliases.append(f"{name}@{alias}")


def _copy_version(src: Registry, dst: Registry, ref: Ref, report: CopyReport) -> int:
    with _pulled(src, ref) as paths:
        _count_missing(dst, paths, report)
        result = dst.push(paths, ref.name, metadata=ref.metadata)
    where = f"{result.name}:{result.version}"
    (report.versions if result.created else report.skipped).append(where)
    return result.version


@contextlib.contextmanager
def _pulled(src: Registry, ref: Ref) -> Iterator[list[Path]]:
    with tempfile.TemporaryDirectory(prefix="jaxport-mirror-") as tmp:
        paths = []
        for i, variant in enumerate(ref.variants):
            path = Path(tmp) / f"{i}.jaxport"
            src.pull_file(f"sha256:{variant.digest}", path, platform=None)
            paths.append(path)
        yield paths


def _count_missing(dst: Registry, paths: list[Path], report: CopyReport) -> None:
    """Counts the parts of ``paths`` the destination lacks (what its push stores or sends)."""
    from jaxport._files import DEFAULT_MAX_READ
    from jaxport.registry._remote_push import archive_parts

    parts = {}
    for path in paths:
        for p in archive_parts(path, vjp_order=0, max_size=DEFAULT_MAX_READ).parts.parts:
            parts[p.digest] = p.size
    try:
        lacking = dst.missing_blobs(list(parts))
    except UnsupportedFeatureError:
        lacking = list(parts)
    report.blobs += len(lacking)
    report.bytes += sum(parts[d] for d in lacking)
    report.blobs_present += len(parts) - len(lacking)
