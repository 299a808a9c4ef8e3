"""The result types of ``jaxport.inspect`` that a registry's results carry (``VariantInfo``'s
methods and tensors): plain dataclasses, importing nothing of jax, so that a registry server's
client decodes its answers without loading jax. ``ArchiveInfo`` and the readers are
``export/_info.py``'s."""

from __future__ import annotations

import dataclasses

__all__ = ["AvalInfo", "MethodInfo", "ModuleInfo", "SectionInfo", "TensorInfo"]


@dataclasses.dataclass(frozen=True)
class AvalInfo:
    """One flat input or output.

    Attributes:
        path: its key path in the (args, kwargs) or result pytree, e.g. ``"[0][0]['w']"``.
        shape: dimension sizes; a symbolic dimension is its expression, e.g. ``"2*b"``.
        dtype: the dtype's name, e.g. ``"float32"``, ``"key<threefry2x32>"``.
        weak_type: whether the aval is weakly typed.
        sharding: ``"P('x', None) over {'x': 4, 'y': 2}"`` for a named sharding, ``"hlo"`` for
            the HloSharding form only, None when unspecified.
    """

    path: str
    shape: tuple[int | str, ...]
    dtype: str
    weak_type: bool
    sharding: str | None


@dataclasses.dataclass(frozen=True)
class ModuleInfo:
    """A StableHLO module: the primal (``vjp_order`` 0) or the VJP of that order.

    ``length`` is in bytes, uncompressed.
    """

    vjp_order: int
    length: int
    stablehlo_version: str
    custom_call_targets: tuple[str, ...]
    method: str = ""  # the model method it belongs to; "" in a function archive


@dataclasses.dataclass(frozen=True)
class SectionInfo:
    """A payload section; ``offset`` from the payload's start, sizes in bytes."""

    offset: int
    length: int
    uncompressed_length: int
    compression: str
    sha256: str


@dataclasses.dataclass(frozen=True)
class MethodInfo:
    """A method of a model archive: its signature without the parameters (sizes in bytes).

    ``in_avals`` are the method's own arguments (paths from ``[0]``, the first argument after
    the parameters); ``vjp_order`` is the VJP order stored.
    """

    name: str
    in_avals: tuple[AvalInfo, ...]
    out_avals: tuple[AvalInfo, ...]
    platforms: tuple[str, ...]
    nr_devices: int
    calling_convention_version: int
    vjp_order: int
    symbolic_constraints: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """A parameter tensor as the header describes it.

    Attributes:
        path: the leaf's key path in the parameter pytree (``jax.tree_util.keystr``), e.g.
            ``"['dense']['kernel']"``.
        shape: its shape.
        dtype: its numpy dtype name, e.g. ``"float32"``, ``"bfloat16"``.
        nbytes: its size in bytes.
        sha256: hex digest of its bytes.
        section: the archive section that holds its bytes.
    """

    path: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    sha256: str
    section: int
