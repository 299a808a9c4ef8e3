"""How to use a version: the Python and CLI lines that pull each of its variants, for its page.

The server cannot know the platform of the machine its reader will run the code on, so a
version's page shows one snippet per platform its variants run on, each naming that platform
(``platform="tpu"``, ``--platform tpu``), with the line that leaving it out picks the variant
of the machine the code runs on (``Registry.pull``'s default: the local jax backend). A
variant exported for more than one device names its device count too (``nr_devices=8``).
The registry's URL is the one the page was read from; the token comes from ``JAXPORT_TOKEN``
(never written into a page).
"""

from __future__ import annotations

import dataclasses
import shlex

from jaxport.registry import Ref, VariantInfo

__all__ = ["Snippet", "snippets"]


@dataclasses.dataclass(frozen=True)
class Snippet:
    """The lines that pull and call one variant on one ``platform``."""

    platform: str
    nr_devices: int
    short_digest: str
    python: str
    cli: str


def snippets(ref: Ref, url: str) -> list[Snippet]:
    """One snippet per (variant, platform) of ``ref``, in the variants' order, for a registry
    served at ``url``."""
    return [
        _snippet(ref, variant, platform, url)
        for variant in ref.variants
        for platform in variant.platforms
    ]


def _snippet(ref: Ref, variant: VariantInfo, platform: str, url: str) -> Snippet:
    reference = f"{ref.name}:{ref.version}"
    args = f"{reference!r}, platform={platform!r}"
    flags = f"--platform {platform}"
    if variant.nr_devices > 1:
        args += f", nr_devices={variant.nr_devices}"
        flags += f" --devices {variant.nr_devices}"
    lines = ["import jaxport", "", f"reg = jaxport.Registry({url!r})  # token: $JAXPORT_TOKEN"]
    if variant.kind == "model":
        lines.append(f"model = reg.pull_model({args})")
        for m in variant.methods:
            inputs = ", ".join(f"{a.dtype}[{', '.join(map(str, a.shape))}]" for a in m.in_avals)
            lines += [f"# {m.name}: ({inputs})", f"out = model.methods[{m.name!r}](...)"]
    else:
        lines += [
            f"exported = reg.pull({args})",
            f"# inputs: {variant.in_signature}",
            f"# outputs: {variant.out_signature}",
            "out = exported.call(...)",
        ]
    cli = f"jaxport --registry {shlex.quote(url)} pull {shlex.quote(reference)} {flags}"
    return Snippet(platform, variant.nr_devices, variant.short_digest, "\n".join(lines), cli)
