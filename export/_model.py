"""``jaxport.Model``: a parameter pytree stored once, as tensors, and named methods taking it.

Each method is a ``jax.export.Exported`` of ``method(params, *args)``: the parameters are its
first argument, never constants inside a module, so they are stored once whatever the number
of methods and VJP orders, and new parameters need no new export (``update_params``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from jaxport import ParamsMismatchError, RunError, UnsupportedFeatureError
from jaxport._grammar import method_problem
from jaxport._io import atomic_write
from jaxport.export import _methods, _model_archive, _tensors
from jaxport.export._model_writer import can_write_in_place, write_model_file
from jaxport.export._tensor_store import TensorStore
from jaxport.export._tensors import TensorInfo

if TYPE_CHECKING:
    from jax.export import Exported

__all__ = ["DEFAULT_METHOD", "Model"]

#: The method name of a model made from a single function.
DEFAULT_METHOD = "apply"


class Model:
    """Parameters (a pytree of arrays) and named methods that take them, exported together.

    Args:
        params: the parameter pytree: dicts, lists, tuples, None and custom nodes registered
            with ``jax.export.register_pytree_node_serialization``; leaves are numpy or jax
            arrays (a sharded ``jax.Array`` is exported with its sharding, and placed with it
            when the method runs). Not typed PRNG keys: store ``jax.random.key_data``.
        apply_fn: ``fn(params, *args)``, or ``{method_name: fn}`` for several methods (a single
            function is the method ``"apply"``).
        input_specs: the ``*args`` of each method as pytrees of ``jax.ShapeDtypeStruct``
            (symbolic shapes from ``jax.export.symbolic_shape`` allowed): a sequence for a
            single function, else ``{method_name: sequence}``.
        platforms: the platforms to export for (``("cpu", "cuda")``); default: the local one.
        vjp_order: VJP orders to store, one int for all methods or ``{method_name: int}``.
        metadata: user strings stored in the archive.

    A model made here or read back (``jaxport.load_model``, ``Registry.pull_model``) runs its
    methods with the parameters bound: ``model.methods["apply"](x)`` or ``model.apply(x)``.

    Raises:
        UnsupportedFeatureError: a leaf that is not an array, a PRNG key, or a pytree node that
            cannot be stored, in the parameters or in a method's outputs (a ``ModelOutput``,
            ``FrozenDict`` or ``eqx.Module``: the message names the method, the output's path
            and the fix, e.g. ``.logits`` or ``dict(out)``); a method name outside
            ``jaxport._grammar.METHOD`` (ASCII letters, digits and '_', starting with a
            letter; a non-ASCII look-alike is named as one) or an attribute of Model.
        ValueError: ``input_specs`` or ``vjp_order`` name a method that does not exist, or miss one.
    """

    #: Lineage (``registry/_lineage.py``): ``(registry url, "NAME:VERSION")`` this model was
    #: pulled as (``Registry.pull_model``), and that of the pulled model ``update_params``
    #: made it from; a push of it to that registry derives from that version.
    _origin: tuple[str, str] | None = None
    _derived: tuple[str, str] | None = None

    def __init__(
        self,
        params: Any,
        apply_fn: Callable[..., Any] | Mapping[str, Callable[..., Any]],
        input_specs: Sequence[Any] | Mapping[str, Sequence[Any]],
        *,
        platforms: Sequence[str] | None = None,
        vjp_order: int | Mapping[str, int] = 0,
        metadata: Mapping[str, str] | None = None,
    ):
        fns = {DEFAULT_METHOD: apply_fn} if callable(apply_fn) else dict(apply_fn)
        specs = input_specs if isinstance(input_specs, Mapping) else {DEFAULT_METHOD: input_specs}
        _check_names(fns, specs, "input_specs")
        params_tree, leaves, paths = _flatten(params)
        arrays = [_tensors.host_array(x, p) for x, p in zip(leaves, paths, strict=True)]
        param_specs = _methods.param_specs(params_tree, leaves, arrays)
        exported = {
            name: _methods.export_method(name, fn, param_specs, specs[name], platforms)
            for name, fn in fns.items()
        }
        self._setup(params_tree, TensorStore.of_arrays(arrays), exported, vjp_order, metadata)

    @classmethod
    def from_exported(
        cls,
        params: Any,
        exported: Mapping[str, Exported],
        *,
        vjp_order: int | Mapping[str, int] = 0,
        metadata: Mapping[str, str] | None = None,
    ) -> Model:
        """A model of methods already exported as ``method(params, *args)``.

        Raises:
            ParamsMismatchError: a method whose first argument is not ``params``' structure,
                shapes and dtypes.
        """
        params_tree, leaves, paths = _flatten(params)
        arrays = [_tensors.host_array(x, p) for x, p in zip(leaves, paths, strict=True)]
        model = cls.__new__(cls)
        model._setup(
            params_tree, TensorStore.of_arrays(arrays), dict(exported), vjp_order, metadata
        )
        for name, exp in model._exported.items():
            model._check_method(name, exp)
        return model

    @classmethod
    def from_safetensors(
        cls,
        path: str | os.PathLike[str],
        apply_fn: Callable[..., Any] | Mapping[str, Callable[..., Any]],
        input_specs: Sequence[Any] | Mapping[str, Sequence[Any]],
        **model_kwargs: Any,
    ) -> Model:
        """A model whose parameters are a safetensors file's tensors, keys ``"a.b"`` nested as
        ``{"a": {"b": ...}}`` (``jaxport.export._import.nest_keys``); the other arguments are
        ``Model``'s. Needs ``pip install jaxport[safetensors]``.

        Raises:
            UnsupportedFeatureError: ``safetensors`` is not installed; conflicting keys
                (``"a"`` and ``"a.b"``); and as ``Model``.
            CorruptArchiveError: not a well-formed safetensors file.
            OSError: the file cannot be read.
        """
        from jaxport.export._import import params_from_safetensors

        return cls(params_from_safetensors(path), apply_fn, input_specs, **model_kwargs)

    @classmethod
    def from_orbax(
        cls,
        directory: str | os.PathLike[str],
        apply_fn: Callable[..., Any] | Mapping[str, Callable[..., Any]],
        input_specs: Sequence[Any] | Mapping[str, Sequence[Any]],
        *,
        step: int | None = None,
        item: str | None = None,
        subtree: str | Sequence[str] | Mapping[str, str] | None = None,
        **model_kwargs: Any,
    ) -> Model:
        """A model whose parameters are an Orbax checkpoint's pytree, restored as numpy arrays
        (``jaxport.export._import.params_from_orbax``); the other arguments are ``Model``'s.
        Needs ``pip install jaxport[orbax]``.

        ``directory``: a checkpoint, or a ``CheckpointManager``'s root (``step``: default the
        newest; ``item``: default the only one, or ``default``). The parameters are the
        ``subtree`` named (``"params"``, ``"state/params"``; ``""`` the whole tree), else a
        train state's ``params``; optimizer moments are never stored as weights. Several
        subtrees: a list of paths, keyed by the paths (``["params", "batch_stats"]`` gives
        flax's variables ``{"params": ..., "batch_stats": ...}``), or a dict ``{key: path}``.

        Raises:
            InvalidArgumentError: ``directory``, ``step``, ``item`` or ``subtree`` of a type it
                does not take (the message says which and what it takes).
            UnsupportedFeatureError: ``orbax-checkpoint`` is not installed; an optimizer state
                without ``params``; and as ``Model``.
            CorruptArchiveError: ``directory`` is not a checkpoint Orbax can restore.
            FileNotFoundError: ``directory`` does not exist, or has no such step, item or
                subtree.
        """
        from jaxport.export._import import params_from_orbax

        params = params_from_orbax(directory, step=step, item=item, subtree=subtree)
        return cls(params, apply_fn, input_specs, **model_kwargs)

    @classmethod
    def _of_store(
        cls,
        params_tree: Any,
        store: TensorStore,
        exported: Mapping[str, Any],
        vjp_orders: Mapping[str, int],
        metadata: Mapping[str, str],
        paths: Sequence[str] | None = None,
    ) -> Model:
        """``paths``: each leaf's path (``tensor_paths(params_tree)``) where the caller has
        them already (a loaded model's header checked each tensor's path against its leaf)."""
        model = cls.__new__(cls)
        model._setup(params_tree, store, dict(exported), dict(vjp_orders), metadata, paths)
        return model

    def _setup(
        self,
        params_tree: Any,
        store: TensorStore,
        exported: dict[str, Any],
        vjp_order: int | Mapping[str, int],
        metadata: Mapping[str, str] | None,
        paths: Sequence[str] | None = None,
    ) -> None:
        orders = {n: vjp_order for n in exported} if isinstance(vjp_order, int) else dict(vjp_order)
        _check_names(exported, orders, "vjp_order")
        for name, exp in exported.items():
            _check_outputs(name, exp.out_tree)
        for name in exported:
            problem = method_problem(name)
            if problem is not None:
                raise UnsupportedFeatureError(problem)
            if hasattr(Model, name):
                raise UnsupportedFeatureError(
                    f"method name {name!r} is an attribute of Model (such as 'params' or 'save')"
                )
        self._params_tree = params_tree
        self._store = store
        self._exported = dict(sorted(exported.items()))
        self._vjp_orders = {n: orders[n] for n in self._exported}
        self._metadata = dict(metadata or {})
        self._paths = list(paths) if paths is not None else _model_archive.tensor_paths(params_tree)
        self._placed: dict[tuple[int, str], Any] = {}
        self._calls: dict[str, Callable[..., Any]] = {}
        self._lock = threading.Lock()

    # -- what it holds ------------------------------------------------------------------------

    @property
    def exported(self) -> Mapping[str, Exported]:
        """Each method's ``Exported``, called as ``exported.call(params, *args)``."""
        return dict(self._exported)

    @property
    def vjp_orders(self) -> Mapping[str, int]:
        """Each method's stored VJP order."""
        return dict(self._vjp_orders)

    @property
    def metadata(self) -> Mapping[str, str]:
        """The user metadata."""
        return dict(self._metadata)

    @property
    def params_tree(self) -> Any:
        """The parameter pytree's treedef."""
        return self._params_tree

    @property
    def tensors(self) -> tuple[TensorInfo, ...]:
        """One ``TensorInfo`` per parameter leaf (path, shape, dtype, bytes, sha256)."""
        return self._store.infos(self._paths)

    @property
    def params(self) -> Any:
        """The parameter pytree of host arrays (every tensor read and verified)."""
        from jax import tree_util

        arrays = self._store.all_arrays()
        return tree_util.tree_unflatten(self._params_tree, arrays)

    @property
    def bytes_read(self) -> int:
        """Bytes of tensors read so far (0 for a model made in memory)."""
        return self._store.bytes_read

    def tensor(self, path: str) -> np.ndarray[Any, Any]:
        """The tensor at ``path`` (as in ``tensors``), read without reading the others.

        Raises:
            KeyError: no such path.
            IntegrityError: its bytes do not match its digest.
        """
        try:
            index = self._paths.index(path)
        except ValueError:
            raise KeyError(f"no parameter {path!r}; the model has {self._paths[:5]}...") from None
        return self._store.array(index)

    # -- running ------------------------------------------------------------------------------

    @property
    def methods(self) -> Mapping[str, Callable[..., Any]]:
        """Each method with the parameters bound: ``methods[name](*args)``."""
        return {name: self._method(name) for name in self._exported}

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_") or name not in self.__dict__.get("_exported", {}):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return self._method(name)

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *self.__dict__.get("_exported", {})})

    def __repr__(self) -> str:
        nbytes = sum(_nbytes(*self._store.spec(i)) for i in range(len(self._store)))
        return f"Model(methods={list(self._exported)}, tensors={len(self._store)}, bytes={nbytes})"

    def _method(self, name: str) -> Callable[..., Any]:
        with self._lock:
            call = self._calls.get(name)
            if call is None:
                specs = [self._store.spec(i) for i in range(len(self._store))]
                call = self._calls[name] = _methods.bind(
                    name,
                    self._exported[name],
                    self._params_tree,
                    specs,
                    lambda: self.placed_params(name)[1],
                )
        return call

    def placed_params(self, name: str) -> tuple[list[int], list[Any]]:
        """The tensors method ``name`` uses, on the devices with the shardings it expects.

        Returns ``(indices, device arrays)``; only the tensors the method's module keeps
        (``module_kept_var_idx``) are read and placed.

        Raises:
            JaxportError: the method needs more devices than this process has.
            IntegrityError: a tensor's bytes do not match its digest.
            RunError: a tensor does not fit in the devices' memory (``_place``).
        """

        exp = self._exported[name]
        n = len(self._store)
        kept = sorted(i for i in exp.module_kept_var_idx if i < n)
        shardings = _methods.in_shardings(exp, n)
        self._store.read_ahead(kept)  # read and verified in threads, placed below in order
        placed = []
        for i in kept:
            key = (i, repr(shardings[i]) if shardings else "")
            with self._lock:
                value = self._placed.get(key)
            if value is None:
                value = self._place(i, shardings[i] if shardings else None)
                with self._lock:
                    self._placed[key] = value
            placed.append(value)
        return kept, placed

    def _place(self, index: int, sharding: Any) -> Any:
        """Tensor ``index`` on its device(s).

        Raises:
            RunError: the devices' memory cannot hold it (jax's ``RESOURCE_EXHAUSTED``, or a
                ``MemoryError`` of the host): a model whose compressed tensors declare up to
                ``max_compression_ratio`` times their stored size fits its archive's bounds,
                not necessarily this process.
            IntegrityError, CorruptArchiveError: as ``TensorStore.array``.
        """
        import jax

        array = self._store.array(index)
        try:
            return jax.device_put(array, sharding)  # None: the default device
        except (jax.errors.JaxRuntimeError, MemoryError) as e:
            if not isinstance(e, MemoryError) and "RESOURCE_EXHAUSTED" not in str(e):
                raise
            info = self._store.spec(index)
            raise RunError(
                f"parameter {self._paths[index]} ({info[1]}{list(info[0])}, {array.nbytes} "
                f"bytes) does not fit in the devices' memory: {str(e)[:200]}"
            ) from None

    # -- writing ------------------------------------------------------------------------------

    def update_params(self, new_params: Any) -> Model:
        """The same methods with ``new_params``: same tree, shapes and dtypes; no re-export.

        A push of the result to the registry this model was pulled from (``pull_model``)
        records that version as its source (``derivation`` ``"update_params"``: lineage).

        Raises:
            ParamsMismatchError: another tree structure, or a leaf of another shape or dtype;
                the message names the first differing path.
            UnsupportedFeatureError: a leaf that is not an array.
        """
        params_tree, leaves, paths = _flatten(new_params)
        if params_tree != self._params_tree:
            raise ParamsMismatchError(_first_tree_difference(self._paths, paths, params_tree))
        arrays = []
        for i, (leaf, path) in enumerate(zip(leaves, paths, strict=True)):
            array = _tensors.host_array(leaf, path)
            shape, dtype = self._store.spec(i)
            if (tuple(array.shape), array.dtype.name) != (shape, dtype):
                raise ParamsMismatchError(
                    f"parameter {path}: {array.dtype.name}{list(array.shape)}, "
                    f"the model's is {dtype}{list(shape)}"
                )
            arrays.append(array)
        model = Model._of_store(
            params_tree,
            self._store.replaced(arrays),
            self._exported,
            self._vjp_orders,
            self._metadata,
        )
        model._derived = self._derived or self._origin
        return model

    def dump_chunks(
        self, *, compress: bool = False, rehash: bool = False
    ) -> list[bytes | memoryview]:
        """The model archive as consecutive chunks (see ``dumps``); raw tensors are views of
        the model's arrays, not copies. ``rehash``: hash every tensor, even one checked against
        its digest when it was read (a registry push does: the name it stores a blob under
        must match the bytes whatever became of the source since)."""
        return _model_archive.dump_model_chunks(self._contents(compress, rehash=rehash))

    def _contents(self, compress: bool, *, rehash: bool = False) -> _model_archive.ModelContents:
        arrays = self._store.all_arrays()
        return _model_archive.ModelContents(
            self._params_tree,
            arrays,
            self._exported,
            self._vjp_orders,
            self._metadata,
            known_digests=() if rehash else self._store.known_digests(),
            compress=compress,
        )

    def dumps(self, *, compress: bool = False) -> bytes:
        """The model archive (format version 2, or 3 with a compressed tensor; schema/FORMAT.md,
        "Model archives").

        ``compress``: zstd-compress each tensor's section where that saves at least an eighth
        of its bytes (and stays within the ratio readers accept by default); such a tensor is
        decompressed (a copy) when read, never memory-mapped. Off by default: raw tensors are
        mapped without copying and saved without compressing.

        The same model (and ``compress``) gives the same bytes. Raises:
            UnsupportedFeatureError, UnsupportedVersionError: see ``jaxport.dumps``.
        """
        return b"".join(self.dump_chunks(compress=compress))

    def save(self, path: str | os.PathLike[str], *, compress: bool = False) -> None:
        """Writes ``dumps(compress=compress)`` to ``path`` atomically (a temporary file renamed
        over it).

        Without ``compress``, threads (one per core) hash and write each tensor a megabyte at a
        time, so its bytes are read from memory once for both, while the disk is asked to
        write what is written; the header, which holds the digests, is written last at the
        start of the file, and the file is fsynced (``_model_writer``). With ``compress`` the
        tensors are written first, hashed meanwhile, then while the disk writes them. A tensor
        read from an archive is not hashed again: it was checked against its digest when it
        was read.

        Raises:
            OSError: the directory is missing or not writable.
            UnsupportedFeatureError, UnsupportedVersionError: see ``jaxport.dumps``.
        """
        contents = self._contents(compress)
        if not compress and can_write_in_place():  # raw tensors: hashed and written in one pass
            write_model_file(path, _model_archive.model_layout(contents))
            return
        chunks, head = _model_archive.model_chunks(contents)
        try:
            atomic_write(path, chunks, head=head)
        finally:
            head.cancel()  # a failed write stops the hashing (a written file's is done)

    def _check_method(self, name: str, exp: Any) -> None:
        n = len(self._store)
        avals = list(exp.in_avals[:n])
        from jax import tree_util

        args = tree_util.treedef_children(tree_util.treedef_children(exp.in_tree)[0])
        if not args or args[0] != self._params_tree:
            raise ParamsMismatchError(
                f"method {name!r}: its first argument is not the parameter tree"
            )
        for i, aval in enumerate(avals):
            shape, dtype = self._store.spec(i)
            if (tuple(aval.shape), aval.dtype.name) != (shape, dtype):
                raise ParamsMismatchError(
                    f"method {name!r} takes {self._paths[i]} as "
                    f"{aval.dtype.name}{list(aval.shape)}, the parameter is {dtype}{list(shape)}"
                )


def _nbytes(shape: tuple[int, ...], dtype: str) -> int:
    itemsize: int = np.dtype(_dtype(dtype)).itemsize
    return int(np.prod(shape, dtype=np.int64)) * itemsize


def _dtype(name: str) -> Any:
    from jaxport.export import _dtypes

    return _dtypes.numpy_dtype(name)


def _check_names(methods: Mapping[str, Any], other: Mapping[str, Any], what: str) -> None:
    if set(other) != set(methods):
        raise ValueError(f"{what} names methods {sorted(other)}, the model has {sorted(methods)}")


def _check_outputs(name: str, out_tree: Any) -> None:
    """Refuses a method whose outputs hold a node the archive cannot store (a library's
    container: transformers' ``ModelOutput``, flax's ``FrozenDict``, an ``eqx.Module``), when
    the model is made rather than when it is saved.

    Raises:
        UnsupportedFeatureError: naming the method, the output's path and the one-line fix.
    """
    from jaxport.export._conversions import output_conversion
    from jaxport.export._pytrees import unstorable_node

    found = unstorable_node(out_tree)
    if found is not None:
        path, node_type = found
        raise UnsupportedFeatureError(
            f"method {name!r} returns a container of type {node_type.__module__}."
            f"{node_type.__qualname__} at out{path}, which an archive cannot store (dicts, "
            f"lists, tuples, None and registered nodes only): {output_conversion(node_type)}"
        )


def _flatten(params: Any) -> tuple[Any, list[Any], list[str]]:
    from jax import tree_util

    leaves, treedef = tree_util.tree_flatten(params)
    return treedef, leaves, _model_archive.tensor_paths(treedef)


def _first_tree_difference(old: Sequence[str], new: Sequence[str], new_tree: Any) -> str:
    for i, (a, b) in enumerate(zip(old, new, strict=False)):
        if a != b:
            return f"parameter tree differs at leaf {i}: {b!r} where the model has {a!r}"
    if len(old) != len(new):
        return f"parameter tree has {len(new)} leaves, the model's {len(old)}"
    return f"parameter tree structure differs: {new_tree} is not the model's"
