"""Bundles for air-gapped sites: versions of a registry written as one OCI image layout in a
tar file (``bundle_export``), and read back into any registry (``bundle_import``).

A bundle is the mapping of ``schema/OCI.md`` in an image layout (``registry/_oci_layout.py``):
each name's versions, their aliases (tags), signatures and findings (referrers). An import
reads the whole tar first, member by member, every blob's digest verified and every
reference in the layout resolved, reads every version's manifests and configs, puts every
archive together (verified) and reads every referrer; only then does it push anything, so a
tampered bundle (a changed byte, a missing blob, an extra file, a name outside the layout, a
link) is a typed error and imports nothing. (An archive whose digests all match but that the
registry's own validation refuses stops the import there: the versions before it stay.)
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from jaxport import InvalidNameError
from jaxport.registry._oci_layout import MAX_BUNDLE_BYTES, OciLayout, open_bundle, write_bundle
from jaxport.registry._oci_mapping import push_version
from jaxport.registry._oci_report import CopyReport
from jaxport.registry._oci_sync import import_repository, versions_of

if TYPE_CHECKING:
    from jaxport.registry._registry import Registry

__all__ = ["bundle_export", "bundle_import"]


def bundle_export(
    registry: Registry, references: Sequence[str], path: str | os.PathLike[str]
) -> CopyReport:
    """Writes the versions ``references`` name to the bundle ``path`` (a tar, written
    atomically): ``NAME`` is every version of the name, ``NAME:VERSION`` and ``NAME@ALIAS``
    one; each with the aliases that point at it, its signatures and its findings.

    Returns:
        A ``CopyReport`` (``bytes``: the parts and other blobs written into the bundle).

    Raises:
        InvalidNameError: no reference, or a malformed one.
        NotFoundError: a name or version that does not exist.
        OciError: a model with too many tensors for one manifest (``schema/OCI.md``).
        IntegrityError: a part of the registry is missing or corrupt.
        OSError: ``path``'s directory is missing or not writable.
    """
    if isinstance(references, str) or not references:
        raise InvalidNameError("bundle_export takes a list of one or more references")
    refs = [ref for reference in references for ref in versions_of(registry, reference)]
    report = CopyReport()
    target = Path(path)
    with tempfile.TemporaryDirectory(prefix=".jaxport-bundle-", dir=target.parent) as tmp:
        layout = OciLayout(tmp, durable=False)  # the tar is what is kept
        for ref in refs:
            push_version(registry, str(ref), layout.repository(ref.name), report)
        write_bundle(layout, target)
    return report


def bundle_import(
    registry: Registry, path: str | os.PathLike[str], *, max_size: int = MAX_BUNDLE_BYTES
) -> CopyReport:
    """Pushes every version of the bundle at ``path`` into ``registry`` (new version numbers
    where the registry numbers them otherwise; a version it holds already is kept), with
    its aliases, signatures and findings (signatures and findings need a direct registry:
    through a server a note says they were not stored).

    Args:
        max_size: the most bytes the bundle's members may hold together.

    Returns:
        A ``CopyReport``.

    Raises:
        NotFoundError: no such file.
        OciError: not an image layout as jaxport writes it: a member outside it, a link, a
            duplicate, a blob nothing refers to, a malformed manifest; over ``max_size``.
        IntegrityError: a blob that does not have its digest, or is missing.
        (and see ``Registry.push`` and ``Registry.alias``)
    """
    report = CopyReport()
    with tempfile.TemporaryDirectory(prefix="jaxport-bundle-") as tmp:
        layout = open_bundle(path, Path(tmp) / "layout", max_size=max_size)
        plans = [import_repository(layout.repository(n), registry) for n in layout.names()]
        for i, plan in enumerate(plans):  # every archive of every name verified first
            staged = Path(tmp) / f"staged-{i}"
            staged.mkdir()
            plan.stage(staged, report)
        for plan in plans:
            plan.commit(report)
    return report
