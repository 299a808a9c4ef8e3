"""``oci://HOST[:PORT]/REPO[:TAG|@DIGEST]``: where ``jaxport oci push`` / ``oci pull`` go.

The repository name, tag and digest follow the OCI distribution spec v1.1 grammar ("Pulling
manifests": ``<name>`` and ``<reference>``). The scheme spoken is ``https``, except to a
loopback host (``127.0.0.0/8``, ``localhost``, ``[::1]``), which is spoken to in plain
``http`` (as Docker treats loopback registries), or with ``insecure`` (``--insecure``,
``JAXPORT_OCI_INSECURE=1``), which allows plain ``http`` to any host. A URL never carries
credentials (``user:pass@`` is refused, without echoing it): they come from the environment or
the Docker config (``registry/_oci_auth.py``).
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from jaxport import InvalidNameError

__all__ = ["INSECURE_ENV", "OciUrl", "is_loopback", "parse_oci_url"]

#: Set to ``1`` to allow plain ``http`` to registries that are not on a loopback address.
INSECURE_ENV = "JAXPORT_OCI_INSECURE"

_NAME = re.compile(
    r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*"
)
_TAG = re.compile(r"[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_HOST = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9-]+)*|\[[0-9a-fA-F:.]+\])(?::[0-9]{1,5})?"
)
_MAX_NAME = 255


@dataclass(frozen=True)
class OciUrl:
    """One repository of one registry, and optionally a tag or digest in it.

    Attributes:
        host: ``HOST[:PORT]`` as written (``[::1]:5000`` keeps its brackets).
        repository: the repository name, e.g. ``team/models/mlp``.
        tag: the tag after ``:``, or None.
        digest: the manifest digest after ``@``, or None.
        scheme: ``http`` or ``https`` (see the module's doc).
    """

    host: str
    repository: str
    tag: str | None
    digest: str | None
    scheme: str

    @property
    def base(self) -> str:
        """The registry's root URL, e.g. ``https://ghcr.io``."""
        return f"{self.scheme}://{self.host}"

    def __str__(self) -> str:
        ref = f":{self.tag}" if self.tag else ""
        ref += f"@{self.digest}" if self.digest else ""
        return f"oci://{self.host}/{self.repository}{ref}"


def is_loopback(host: str) -> bool:
    """Whether ``host`` (``HOST[:PORT]``, no scheme) names this machine: ``localhost``,
    ``127.0.0.0/8`` or ``[::1]``."""
    name = urlsplit("//" + host).hostname or ""
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def parse_oci_url(url: str, *, insecure: bool | None = None) -> OciUrl:
    """``oci://HOST[:PORT]/REPO[:TAG|@sha256:HEX]`` parsed and checked.

    Args:
        url: the reference; the ``oci://`` prefix is required.
        insecure: allow plain ``http`` to a non-loopback host; None reads ``JAXPORT_OCI_INSECURE``.

    Raises:
        InvalidNameError: not of that form; the message names the rule broken (and never
            repeats credentials written into the URL).
    """
    if not url.startswith("oci://"):
        raise InvalidNameError(
            f"an OCI reference starts with oci://, e.g. oci://HOST/REPO:TAG (got {url[:80]!r})"
        )
    rest = url[len("oci://") :]
    host, slash, path = rest.partition("/")
    if "@" in host:
        raise InvalidNameError(
            "an oci:// URL carries no credentials: set JAXPORT_OCI_USERNAME and "
            "JAXPORT_OCI_PASSWORD, or log in with docker login (the Docker config's auths)"
        )
    if not slash or not _HOST.fullmatch(host):
        raise InvalidNameError(
            f"an OCI reference is oci://HOST[:PORT]/REPO[:TAG] (got {url[:120]!r})"
        )
    path, at, digest = path.partition("@")
    repository, tag = path, None
    last = path.rsplit("/", 1)[-1]
    if ":" in last:
        repository, _, tag = path.rpartition(":")
    _check_parts(url, repository, tag, digest if at else None)
    if insecure is None:
        insecure = os.environ.get(INSECURE_ENV, "") in ("1", "true", "yes")
    scheme = "http" if insecure or is_loopback(host) else "https"
    return OciUrl(host, repository, tag, digest if at else None, scheme)


def _check_parts(url: str, repository: str, tag: str | None, digest: str | None) -> None:
    if not _NAME.fullmatch(repository) or len(repository) > _MAX_NAME:
        raise InvalidNameError(
            f"{url[:120]!r}: the repository name is lower-case letters, digits and . _ __ - "
            "separators, in /-separated parts (OCI distribution spec), at most 255 characters"
        )
    if tag is not None and not _TAG.fullmatch(tag):
        raise InvalidNameError(f"{url[:120]!r}: a tag is [A-Za-z0-9_][A-Za-z0-9._-]{{0,127}}")
    if digest is not None and not _DIGEST.fullmatch(digest):
        raise InvalidNameError(f"{url[:120]!r}: a digest is sha256: and 64 lower-case hex digits")
