"""The one-line conversion that makes a library's container a tree jaxport stores.

A parameter tree is stored as dicts (string keys), lists, tuples, None and custom nodes
registered with ``jax.export.register_pytree_node_serialization`` (or
``register_namedtuple_serialization``). Libraries hold parameters in their own registered
pytree nodes; ``conversion`` names, for such a node type, the call that turns it into plain
containers (or registers it), as a refusal's message says it. The types are recognized by
their module and class names, so no library is imported here.
"""

from __future__ import annotations

__all__ = ["STRING_KEYS", "conversion", "output_conversion"]

#: How to store a dict with non-string keys (``nnx.to_pure_dict`` gives ``int`` keys to the
#: layers of a list).
STRING_KEYS = (
    "make the keys strings, e.g. {'/'.join(map(str, k)): v for k, v in "
    "flax.traverse_util.flatten_dict(params).items()} (rebuilt in the method with "
    "flax.traverse_util.unflatten_dict(params, sep='/'); nnx.replace_by_pure_dict reads "
    "digit strings as int keys)"
)

_GENERIC = (
    "pass plain dicts, lists and tuples (e.g. jax.tree.leaves(tree), rebuilt in the method "
    "with jax.tree.unflatten), or register the type with "
    "jax.export.register_pytree_node_serialization"
)


def conversion(node_type: type) -> str:
    """The conversion a refusal of ``node_type`` suggests (library types by name)."""
    names = {f"{t.__module__}.{t.__qualname__}" for t in node_type.__mro__}
    if "flax.core.frozen_dict.FrozenDict" in names:
        return "convert it with flax.core.unfreeze(params) (flax.linen's apply takes a dict)"
    if "flax.nnx.statelib.State" in names:
        return (
            "convert it with nnx.to_pure_dict(state) (or state.to_pure_dict()); in the method "
            "nnx.replace_by_pure_dict(a copy of the state, params), then "
            "nnx.merge(graphdef, state)"
        )
    if any(n.startswith("equinox.") and n.endswith("._module.Module") for n in names):
        return (
            "split it with params, static = eqx.partition(model, eqx.is_array) and store "
            "jax.tree.leaves(params); in the method rebuild it with "
            "eqx.combine(jax.tree.unflatten(jax.tree.structure(params), leaves), static)"
        )
    if issubclass(node_type, tuple) and hasattr(node_type, "_fields"):
        name = f"{node_type.__module__.split('.')[0]}.{node_type.__qualname__}"
        return (
            f"register the namedtuple with jax.export.register_namedtuple_serialization("
            f"{node_type.__qualname__}, serialized_name={name!r}) (an optax state is a "
            "tuple of such namedtuples: register each), or store tuple(state)"
        )
    return _GENERIC


def output_conversion(node_type: type) -> str:
    """The one-line fix of a method that returns a library container of ``node_type``
    (library types by name, as ``conversion``)."""
    names = {f"{t.__module__}.{t.__qualname__}" for t in node_type.__mro__}
    if any(n.startswith("transformers.") and n.endswith(".ModelOutput") for n in names):
        return "return out.logits (the arrays you need) or dict(out) from the method"
    if "flax.core.frozen_dict.FrozenDict" in names:
        return "return dict(out) from the method (flax.core.unfreeze(out) where it nests)"
    if any(n.startswith("equinox.") and n.endswith("._module.Module") for n in names):
        return (
            "return the arrays you need from the method (out.field, or a tuple or dict of "
            "them), or jax.tree.leaves(out)"
        )
    if issubclass(node_type, tuple) and hasattr(node_type, "_fields"):
        return "return tuple(out) or out._asdict() from the method, or " + conversion(node_type)
    return "return a dict, list or tuple of its arrays from the method, or " + _GENERIC
