"""``Registry.oci_push`` / ``oci_pull``: a version to and from a repository of an OCI registry
(``registry/_oci_client.py``), in the mapping of ``schema/OCI.md`` (``registry/_oci_mapping.py``).
A mixin of ``Registry`` (``registry/_registry.py``).

A push sends only the blobs and manifests the repository lacks (a fine-tune that changed one
tensor sends that tensor's layer, its variant manifest and the index), tags the version's
index ``vN``, each alias that points at it, and the ``:TAG`` of the URL. A pull reads and
verifies every manifest, config and layer before it stores anything; into a registry it
pushes the version (all its variants, and the signatures and findings attached as referrers),
with ``output`` it writes one variant's archive to a file and leaves the registry alone.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jaxport import InvalidNameError
from jaxport._extras import require
from jaxport.registry._oci_report import CopyReport
from jaxport.registry._oci_url import OciUrl, parse_oci_url
from jaxport.registry._platforms import LOCAL_PLATFORM, chosen_platform

if TYPE_CHECKING:
    from jaxport.registry._oci_client import OciRepository
    from jaxport.registry._registry import Registry

__all__ = ["OciTransfer", "RegistryOci", "oci_pull_file"]


@dataclasses.dataclass(frozen=True)
class OciTransfer:
    """What an ``oci_push`` or ``oci_pull`` did.

    Attributes:
        url: the version's image index in the OCI repository, ``oci://HOST/REPO@sha256:...``.
        digest: that index's digest.
        name: the version's name in the registry (a push: the one pushed; a pull: the one
            stored, or the one the index records when written to a file).
        version: its number in the registry (a file: the number the index records, or None).
        path: the archive written (``oci_pull(output=...)``), else None.
        report: what was copied, counted (blobs and bytes sent or fetched, manifests,
            signatures, findings; what was there already). Written to a file: the layers
            fetched and their bytes.
    """

    url: str
    digest: str
    name: str
    version: int | None
    path: Path | None
    report: CopyReport


class RegistryOci:
    """``Registry``'s OCI distribution (see ``Registry``)."""

    def oci_push(
        self, reference: str, destination: str, *, insecure: bool | None = None
    ) -> OciTransfer:
        """Pushes the version ``reference`` names (``NAME:VERSION``, ``NAME@ALIAS``, ``NAME``)
        to the OCI repository ``destination`` (``oci://HOST[:PORT]/REPO[:TAG]``), with its
        aliases, signatures and findings (see the module's doc).

        Args:
            reference: the version.
            destination: the repository; its ``:TAG`` (optional) is one more tag for the
                version's index. No ``@digest``.
            insecure: plain ``http`` to a host that is not a loopback address (None reads
                ``JAXPORT_OCI_INSECURE``). Credentials: ``JAXPORT_OCI_USERNAME`` /
                ``JAXPORT_OCI_PASSWORD``, else the Docker config's ``auths``.

        Raises:
            InvalidNameError: ``destination`` is not an ``oci://`` repository URL, or names a
                digest.
            NotFoundError: no such version.
            AuthenticationError, PermissionDeniedError: the registry refused the credentials.
            OciError: the registry refused a blob or manifest, or answered what jaxport refuses.
            IntegrityError: a part of the registry is missing or corrupt, or the registry
                stored other bytes than sent.
            ServerUnavailableError: the registry cannot be reached.
        """
        url = parse_oci_url(destination, insecure=insecure)
        if url.digest is not None:
            raise InvalidNameError(f"{url}: a push names a tag, not a digest")
        from jaxport.registry._oci_mapping import push_version

        report = CopyReport()
        registry: Registry = self  # type: ignore[assignment]
        ref = registry.get(reference)
        with _repository(url) as repo:
            digest = push_version(
                registry,
                f"{ref.name}:{ref.version}",
                repo,
                report,
                tags=[url.tag] if url.tag else [],
            )
        where = dataclasses.replace(url, tag=None, digest=digest)
        return OciTransfer(str(where), digest, ref.name, ref.version, None, report)

    def oci_pull(
        self,
        source: str,
        output: str | os.PathLike[str] | None = None,
        *,
        name: str | None = None,
        platform: Any = LOCAL_PLATFORM,
        nr_devices: int | None = None,
        insecure: bool | None = None,
    ) -> OciTransfer:
        """Pulls the version at ``source`` (``oci://HOST/REPO:TAG`` or ``@sha256:...`` of its
        index; no tag: ``latest``) into this registry, or one variant's archive to ``output``.

        Args:
            source: the version's index in an OCI repository.
            output: a file to write the variant for ``platform`` and ``nr_devices`` to
                (atomically; the registry is not touched); None pushes the whole version into
                this registry, as ``name`` (default: the name its index records), with its
                signatures and findings where this registry can store them.
            name: the name to store it under (not with ``output``).
            platform: with ``output``: the variant's platform (``LOCAL_PLATFORM``: this
                machine's; None: any).
            nr_devices: with ``output``: the variant's device count (None: any).
            insecure: as for ``oci_push``.

        Raises:
            InvalidNameError: ``source`` is not an ``oci://`` URL; ``name`` with ``output``.
            NotFoundError: no such tag or manifest; with ``output``, no variant runs on
                ``platform`` with ``nr_devices`` (the message lists the variants).
            OciError: not a jaxport version's index, or a malformed manifest or config, or an
                answer jaxport refuses.
            IntegrityError: a manifest, config, layer or the assembled archive does not have
                its digest (nothing is stored).
            AuthenticationError, PermissionDeniedError, ServerUnavailableError: as for
                ``oci_push``.
        """
        if output is not None:
            if name is not None:
                raise InvalidNameError(
                    "name= stores a pulled version in the registry; not with output="
                )
            return oci_pull_file(
                source, output, platform=platform, nr_devices=nr_devices, insecure=insecure
            )
        url = parse_oci_url(source, insecure=insecure)
        reference = url.digest or url.tag or "latest"
        report = CopyReport()
        with _repository(url) as repo:
            from jaxport.registry._oci_mapping import pull_version, read_version

            registry: Registry = self  # type: ignore[assignment]
            found = read_version(repo, reference)
            digest = found.index.digest
            result = pull_version(repo, digest, registry, report, name=name, version=found)
        where = dataclasses.replace(url, tag=None, digest=digest)
        return OciTransfer(str(where), digest, result.name, result.version, None, report)


def oci_pull_file(
    source: str,
    output: str | os.PathLike[str],
    *,
    platform: Any = LOCAL_PLATFORM,
    nr_devices: int | None = None,
    insecure: bool | None = None,
) -> OciTransfer:
    """Writes the archive of the variant of the version at ``source`` that runs on
    ``platform`` with ``nr_devices`` to ``output``, every part verified, without a registry
    (``Registry.oci_pull(source, output)``, ``jaxport oci pull -o``); see ``oci_pull``."""
    from jaxport.registry._oci_mapping import read_version, write_variant

    url = parse_oci_url(source, insecure=insecure)
    with _repository(url) as repo:
        found = read_version(repo, url.digest or url.tag or "latest")
        digest, path, report = found.index.digest, Path(output), CopyReport()
        write_variant(
            repo, digest, path, platform=chosen_platform(platform), nr_devices=nr_devices,
            report=report,
        )  # fmt: skip
    where = dataclasses.replace(url, tag=None, digest=digest)
    return OciTransfer(str(where), digest, found.name, found.version, path, report)


def _repository(url: OciUrl) -> OciRepository:
    """The repository's client; httpx comes with the ``client`` extra."""
    require("httpx", "an OCI registry's client")
    from jaxport.registry._oci_client import OciRepository

    return OciRepository(url)
