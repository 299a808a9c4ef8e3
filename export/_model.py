"""``jaxport.Model``: a parameter pytree stored once, as tensors, and named methods taking it.

Each method is a ``jax.export.Exported`` of ``method(params, *args)``: the parameters are its
first argument, never constants inside a module, so they are stored once whatever the number
of methods and VJP orders, and new parameters need no new export (``update_params``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

from jaxport._errors import JaxportError, ParamsMismatchError, UnsupportedFeatureError
from jaxport._io import atomic_write
from jaxport.export import _compat, _model_archive, _tensors
from jaxport.export._tensors import TensorInfo

if TYPE_CHECKING:
    from jax.export import Exported

__all__ = ["DEFAULT_METHOD", "Model", "TensorStore"]

#: The method name of a model made from a single function.
DEFAULT_METHOD = "apply"
#: Threads that verify tensors when all of them are read (``TensorStore.all_arrays``).
_VERIFY_THREADS = min(8, os.cpu_count() or 1)


class TensorStore:
    """The parameter tensors of a model: arrays in memory, or bytes read (and verified) lazily.

    ``read`` gives a tensor's stored bytes (a memory-mapped view where it can); each tensor is
    read and checked against its sha256 once, the first time it is asked for.
    """

    def __init__(
        self,
        infos: Sequence[TensorInfo] | None,
        arrays: Sequence[np.ndarray[Any, Any] | None],
        read: Callable[[TensorInfo], bytes | memoryview] | None = None,
        path: str | None = None,
    ):
        self._infos = tuple(infos) if infos is not None else None
        self._arrays = list(arrays)
        self._read = read
        self._path = path
        self._lock = threading.Lock()  # guards bytes_read
        self._tensor_locks = [threading.Lock() for _ in self._arrays]  # each read once
        self.bytes_read = 0

    @classmethod
    def of_arrays(cls, arrays: Sequence[np.ndarray[Any, Any]]) -> TensorStore:
        """A store of host arrays (``_tensors.host_array``), digests computed when asked."""
        return cls(None, arrays)

    def __len__(self) -> int:
        return len(self._arrays)

    def infos(self, paths: Sequence[str]) -> tuple[TensorInfo, ...]:
        """Each tensor's info (the digests of in-memory arrays are computed now)."""
        if self._infos is None:
            infos = []
            for i, (p, a) in enumerate(zip(paths, self._arrays, strict=True)):
                assert a is not None
                data = _tensors.tensor_bytes(a)
                digest = _sha256(data)
                infos.append(TensorInfo(p, tuple(a.shape), a.dtype.name, len(data), digest, i + 1))
            self._infos = tuple(infos)
        return self._infos

    def spec(self, index: int) -> tuple[tuple[int, ...], str]:
        """``(shape, dtype name)`` of tensor ``index``, without reading it."""
        array = self._arrays[index]
        if array is not None:
            return tuple(array.shape), array.dtype.name
        assert self._infos is not None
        return self._infos[index].shape, self._infos[index].dtype

    def array(self, index: int) -> np.ndarray[Any, Any]:
        """Tensor ``index`` as a read-only host array, verified against its digest.

        Raises:
            IntegrityError: its bytes do not match its digest.
            CorruptArchiveError, OSError: its bytes cannot be read.
        """
        array = self._arrays[index]
        if array is not None:
            return array
        with self._tensor_locks[index]:  # other tensors are read meanwhile, in other threads
            array = self._arrays[index]
            if array is None:
                assert self._infos is not None and self._read is not None
                info = self._infos[index]
                data = self._read(info)
                with self._lock:
                    self.bytes_read += len(data)
                array = _tensors.array_from_bytes(info, data, path=self._path)
                self._arrays[index] = array
        return array

    def all_arrays(self) -> list[np.ndarray[Any, Any]]:
        """Every tensor, as ``array`` gives it; those not read yet are read and verified in
        threads (hashlib releases the GIL). Raises: as ``array``, for the first bad tensor."""
        unread = [i for i, a in enumerate(self._arrays) if a is None]
        if len(unread) > 1:
            with ThreadPoolExecutor(_VERIFY_THREADS) as pool:
                list(pool.map(self.array, unread))
        return [self.array(i) for i in range(len(self._arrays))]


def _sha256(data: memoryview) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


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
            cannot be stored; a method name that is not an identifier.
        ValueError: ``input_specs`` or ``vjp_order`` name a method that does not exist, or miss one.
    """

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
        param_specs = _param_specs(params_tree, leaves, arrays)
        exported = {
            name: _export_method(name, fn, param_specs, specs[name], platforms)
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
        **model_kwargs: Any,
    ) -> Model:
        """A model whose parameters are an Orbax checkpoint's pytree, restored as numpy arrays
        (``jaxport.export._import.params_from_orbax``); the other arguments are ``Model``'s.
        Needs ``pip install jaxport[orbax]``.

        Raises:
            UnsupportedFeatureError: ``orbax-checkpoint`` is not installed; and as ``Model``.
            CorruptArchiveError: ``directory`` is not a checkpoint Orbax can restore.
            FileNotFoundError: ``directory`` does not exist.
        """
        from jaxport.export._import import params_from_orbax

        return cls(params_from_orbax(directory), apply_fn, input_specs, **model_kwargs)

    @classmethod
    def _of_store(
        cls,
        params_tree: Any,
        store: TensorStore,
        exported: Mapping[str, Any],
        vjp_orders: Mapping[str, int],
        metadata: Mapping[str, str],
    ) -> Model:
        model = cls.__new__(cls)
        model._setup(params_tree, store, dict(exported), dict(vjp_orders), metadata)
        return model

    def _setup(
        self,
        params_tree: Any,
        store: TensorStore,
        exported: dict[str, Any],
        vjp_order: int | Mapping[str, int],
        metadata: Mapping[str, str] | None,
    ) -> None:
        orders = {n: vjp_order for n in exported} if isinstance(vjp_order, int) else dict(vjp_order)
        _check_names(exported, orders, "vjp_order")
        for name in exported:
            if not name.isidentifier() or name.startswith("_") or hasattr(Model, name):
                raise UnsupportedFeatureError(
                    f"method name {name!r} is not an identifier, starts with '_' or is an "
                    "attribute of Model (such as 'params' or 'save')"
                )
        self._params_tree = params_tree
        self._store = store
        self._exported = dict(sorted(exported.items()))
        self._vjp_orders = {n: orders[n] for n in self._exported}
        self._metadata = dict(metadata or {})
        self._paths = _model_archive.tensor_paths(params_tree)
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
                call = self._calls[name] = _bind(self, name)
        return call

    def placed_params(self, name: str) -> tuple[list[int], list[Any]]:
        """The tensors method ``name`` uses, on the devices with the shardings it expects.

        Returns ``(indices, device arrays)``; only the tensors the method's module keeps
        (``module_kept_var_idx``) are read and placed.

        Raises:
            JaxportError: the method needs more devices than this process has.
            IntegrityError: a tensor's bytes do not match its digest.
        """
        import jax

        exp = self._exported[name]
        n = len(self._store)
        kept = sorted(i for i in exp.module_kept_var_idx if i < n)
        shardings = _shardings(exp, n)
        placed = []
        for i in kept:
            key = (i, repr(shardings[i]) if shardings else "")
            with self._lock:
                value = self._placed.get(key)
            if value is None:
                array = self._store.array(i)
                value = jax.device_put(array, shardings[i]) if shardings else jax.device_put(array)
                with self._lock:
                    self._placed[key] = value
            placed.append(value)
        return kept, placed

    # -- writing ------------------------------------------------------------------------------

    def update_params(self, new_params: Any) -> Model:
        """The same methods with ``new_params``: same tree, shapes and dtypes; no re-export.

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
        return Model._of_store(
            params_tree,
            TensorStore.of_arrays(arrays),
            self._exported,
            self._vjp_orders,
            self._metadata,
        )

    def dump_chunks(self) -> list[bytes | memoryview]:
        """The model archive as consecutive chunks (see ``dumps``)."""
        return _model_archive.dump_model_chunks(self._contents())

    def _contents(self) -> _model_archive.ModelContents:
        arrays = self._store.all_arrays()
        return _model_archive.ModelContents(
            self._params_tree, arrays, self._exported, self._vjp_orders, self._metadata
        )

    def dumps(self) -> bytes:
        """The model archive (format version 2, schema/FORMAT.md "Model archives").

        The same model gives the same bytes. Raises:
            UnsupportedFeatureError, UnsupportedVersionError: see ``jaxport.dumps``.
        """
        return b"".join(self.dump_chunks())

    def save(self, path: str | os.PathLike[str]) -> None:
        """Writes ``dumps()`` to ``path`` atomically (a temporary file renamed over it).

        The tensors are hashed while they are written; the header, which holds their
        digests, is written last, over a placeholder of its size.

        Raises:
            OSError: the directory is missing or not writable.
            UnsupportedFeatureError, UnsupportedVersionError: see ``jaxport.dumps``.
        """
        chunks, head = _model_archive.model_chunks(self._contents())
        atomic_write(path, chunks, head=head)

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


def _flatten(params: Any) -> tuple[Any, list[Any], list[str]]:
    from jax import tree_util

    leaves, treedef = tree_util.tree_flatten(params)
    return treedef, leaves, _model_archive.tensor_paths(treedef)


def _param_specs(params_tree: Any, leaves: Sequence[Any], arrays: Sequence[Any]) -> Any:
    """ShapeDtypeStructs of the parameters (the host arrays' shapes and canonical dtypes),
    with the sharding of the leaves that are sharded jax Arrays."""
    import jax
    from jax import tree_util

    def spec(leaf: Any, array: Any) -> Any:
        sharding = getattr(leaf, "sharding", None)
        if isinstance(leaf, jax.Array) and len(sharding.device_set) > 1:  # type: ignore[union-attr]
            return jax.ShapeDtypeStruct(array.shape, array.dtype, sharding=sharding)
        return jax.ShapeDtypeStruct(array.shape, array.dtype)

    specs = [spec(x, a) for x, a in zip(leaves, arrays, strict=True)]
    return tree_util.tree_unflatten(params_tree, specs)


def _export_method(
    name: str,
    fn: Callable[..., Any],
    param_specs: Any,
    arg_specs: Sequence[Any],
    platforms: Sequence[str] | None,
) -> Any:
    import jax
    import jax.export

    def method(params: Any, *args: Any) -> Any:
        return fn(params, *args)

    method.__name__ = method.__qualname__ = name
    return jax.export.export(jax.jit(method), platforms=platforms)(param_specs, *arg_specs)


def _shardings(exp: Any, n: int) -> list[Any] | None:
    """The shardings the method expects for its first ``n`` inputs, on local devices, or None
    for a single-device method."""
    if exp.nr_devices == 1:
        return None
    import jax

    devices = jax.local_devices()
    if len(devices) < exp.nr_devices:
        raise JaxportError(
            f"the method was exported for {exp.nr_devices} devices, this process has "
            f"{len(devices)} (on CPU: XLA_FLAGS=--xla_force_host_platform_device_count="
            f"{exp.nr_devices})"
        )
    return _compat.in_shardings_on(exp, devices)[:n]


def _bind(model: Model, name: str) -> Callable[..., Any]:
    """``method(*args)``: the Exported called with the parameters it keeps, placed once."""
    import jax
    import jax.numpy as jnp
    from jax import tree_util

    exp = model._exported[name]
    n = len(model._store)
    specs = [model._store.spec(i) for i in range(n)]
    kept = sorted(i for i in exp.module_kept_var_idx if i < n)

    def call(kept_values: list[Any], *args: Any) -> Any:
        # Parameters the module does not use are dropped by jax (module_kept_var_idx):
        # zeros stand in for them and XLA removes them.
        values = dict(zip(kept, kept_values, strict=True))
        leaves = [values[i] if i in values else jnp.zeros(*specs[i]) for i in range(n)]
        return exp.call(tree_util.tree_unflatten(model._params_tree, leaves), *args)

    jitted = jax.jit(call)

    def method(*args: Any) -> Any:
        _, placed = model.placed_params(name)
        return jitted(placed, *args)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"Runs method {name!r} of the model with its parameters bound."
    return method


def _first_tree_difference(old: Sequence[str], new: Sequence[str], new_tree: Any) -> str:
    for i, (a, b) in enumerate(zip(old, new, strict=False)):
        if a != b:
            return f"parameter tree differs at leaf {i}: {b!r} where the model has {a!r}"
    if len(old) != len(new):
        return f"parameter tree has {len(new)} leaves, the model's {len(old)}"
    return f"parameter tree structure differs: {new_tree} is not the model's"
