"""``CopyReport``: what a bundle export or import, a mirror or an OCI push or pull copied."""

from __future__ import annotations

import dataclasses

__all__ = ["CopyReport"]


@dataclasses.dataclass
class CopyReport:
    """What was copied, counted as it happens (a second run of the same copy counts none).

    Attributes:
        versions: ``NAME:VERSION`` of each version written (at the destination's numbering
            where it is a registry; an OCI destination keeps the source's, as tag ``vN``).
        skipped: versions the destination held already (nothing of them sent).
        aliases: ``NAME@ALIAS`` set at the destination (or tagged there).
        blobs: blobs (parts, configs, signature and findings layers) sent or fetched.
        bytes: their bytes.
        blobs_present: blobs not sent because the destination held them.
        manifests: manifests and indexes written to an OCI destination.
        signatures: signatures stored (or attached as referrers).
        findings: audit findings stored (or attached: each finding counted once).
        notes: what could not be copied, and why.
    """

    versions: list[str] = dataclasses.field(default_factory=list)
    skipped: list[str] = dataclasses.field(default_factory=list)
    aliases: list[str] = dataclasses.field(default_factory=list)
    blobs: int = 0
    bytes: int = 0
    blobs_present: int = 0
    manifests: int = 0
    signatures: int = 0
    findings: int = 0
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def copied_anything(self) -> bool:
        """Whether anything was written (versions, blobs, manifests, aliases, signatures or
        findings)."""
        return bool(self.versions or self.blobs or self.manifests or self.signatures
                    or self.findings)  # fmt: skip
