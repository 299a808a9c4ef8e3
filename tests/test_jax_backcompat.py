"""Every entry of jax's own back-compat test data, through jaxport: archive, registry, audit.

jax ships the modules its back-compat tests replay
(``jax/_src/internal_test_util/export_back_compat_test_data/``): ``CompatTestData`` dicts (a
serialized StableHLO module with its platform, calling convention version, inputs and expected
outputs) and, in ``export_with_*.py``, whole ``Exported.serialize()`` bytes. For each entry of
the installed jax:

- ``test_archive``: the ``Exported`` (built as jax's ``run_serialized`` builds it, or
  ``jax.export.deserialize``) round-trips through ``dumps``/``loads`` field by field,
  ``inspect`` agrees with it, and ``loads`` with the default trust accepts it (entries whose
  targets jax does not guarantee stable name them in ``allow_custom_calls``);
- ``test_run`` (CPU entries): jaxport's loaded Exported runs, matches the entry's expected
  outputs (jax's tolerance for that test) and jax's own call of the same module;
- ``test_registry``: pushed to a SQLite registry, pulled back byte-exact;
- ``test_audit``: the audit's verdict is what jax's direct call does: ``ok`` where jax runs
  it, ``not-run`` for a platform with no device here.

Entries are ids ``FILE:PATH`` (``cpu_qr_lapack_geqrf:data_2025_04_02/f32``). Nothing here is
generated: the data comes with jax. Runs with ``jax_enable_x64`` (jax's own tests need it for
the f64/c128 entries) and the 8 host devices tests/conftest.py sets.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import re
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import numpy as np
import pytest
from jax._src.internal_test_util import export_back_compat_test_data as _data_pkg

import jaxport
from _helpers import assert_exported_equal, from_compat_data
from jaxport.export import _compat

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def _x64_module() -> Iterator[None]:
    """64-bit types for the whole module, as jax's back-compat tests run (before any fixture
    builds an aval: with x64 off, an f64 aval would silently become f32)."""
    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", previous)


@dataclasses.dataclass(frozen=True)
class Entry:
    """One entry of jax's data: a ``CompatTestData`` dict, or an ``Exported.serialize()``."""

    id: str
    data: dict[str, Any]

    @property
    def native(self) -> bool:
        return "exported_serialized" in self.data

    @property
    def file(self) -> str:
        return self.id.split(":")[0]


def _walk(nest: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], dict[str, Any]]]:
    if isinstance(nest, dict) and ("testdata_version" in nest or "exported_serialized" in nest):
        yield path, nest
    elif isinstance(nest, dict):
        for k, v in nest.items():
            yield from _walk(v, (*path, str(k)))
    elif isinstance(nest, list | tuple):
        for i, v in enumerate(nest):
            yield from _walk(v, (*path, str(i)))


def _entries() -> list[Entry]:
    out = []
    for m in pkgutil.walk_packages(_data_pkg.__path__, _data_pkg.__name__ + "."):
        if m.ispkg:
            continue
        module = importlib.import_module(m.name)
        file = m.name.removeprefix(_data_pkg.__name__ + ".")
        for name, value in sorted(vars(module).items()):
            if name.startswith("_") or not isinstance(value, dict | list):
                continue
            for path, data in _walk(value, (name,)):
                out.append(Entry(f"{file}:{'/'.join(path)}", data))
    return out


ENTRIES = _entries()

#: jax's polymorphic_shapes for the entries of tests/export_back_compat_test.py that use them.
_POLYMORPHIC = {
    "stablehlo_dynamic_approx_top_k": ("b + 4,",),
    "stablehlo_dynamic_rng_bit_generator": (None, "b0, b1"),
    "stablehlo_dynamic_top_k": ("_, b",),
    "tpu_stablehlo_dynamic_reduce_window:data_unary_2023_06_17": ("b, ...",),
    "tpu_stablehlo_dynamic_reduce_window:data_variadic_2023_06_17": ("b, ...", "b, ..."),
}
#: jax's tolerances per dtype name (tests/export_back_compat_test.py), else rtol 1e-7.
_RTOL = {"f32": 1e-3, "f64": 1e-5, "c64": 1e-3, "c128": 1e-5}
_ATOL = {"f32": 1e-4, "f64": 1e-12, "c64": 1e-4, "c128": 1e-12}
#: jax's assertAllClose default atol per dtype when a test gives none (jax._src.test_util).
_DEFAULT_ATOL = {
    np.dtype(np.float16): 1e-3,
    np.dtype(np.float32): 1e-6,
    np.dtype(np.float64): 1e-15,
    np.dtype(np.complex64): 1e-6,
    np.dtype(np.complex128): 1e-15,
}
#: What the jax-native entries compute, from tests/export_serialization_back_compat_test.py.
_NATIVE_FUNCTIONS = {
    "export_with_specified_sharding": lambda a: (a * 2.0,),
    "export_with_unspecified_sharding": lambda a: (a * 2.0,),
    "export_with_multiple_meshes": lambda inputs, weights: tuple(
        i @ w for i, w in zip(inputs, weights, strict=True)
    ),
}


def _polymorphic(entry: Entry) -> Sequence[str | None] | None:
    return _POLYMORPHIC.get(entry.id, _POLYMORPHIC.get(entry.file))


def _tolerance(entry: Entry) -> tuple[float, float | None]:
    """(rtol, atol) as jax's test for this entry gives them (atol None: jax's default)."""
    name = entry.id.rsplit("/", 1)[-1]
    return _RTOL.get(name, 1e-7), _ATOL.get(name)


def _exported(entry: Entry) -> Any:
    """The Exported of an entry, built as jax's back-compat tests build it."""
    if entry.native:
        return jax.export.deserialize(bytearray(entry.data["exported_serialized"]))
    return from_compat_data(entry.data, _polymorphic(entry))


def _module_targets(exp: Any) -> set[str]:
    """Every custom-call target in the entry's module (jax's own regex, from its test util)."""
    return set(re.findall(r"stablehlo\.custom_call\s*@([^\(\s]+)\(", str(exp.mlir_module())))


def _trusted_targets(exp: Any) -> tuple[str, ...]:
    """The targets the test names in ``allow_custom_calls``: the entry's own vendor kernels
    that jax does not guarantee stable (ROCm's hipsolver eigh, Pallas Triton). Shardy's
    ``xla.sdy.*`` markers are not among them: jax emits them itself, so the default trust must
    accept them."""
    stable = jaxport.stable_custom_call_targets() | {"shape_assertion"}
    unstable = _module_targets(exp) - stable
    return tuple(sorted(t for t in unstable if not t.startswith("xla.sdy.")))


def _runs_here(exp: Any) -> bool:
    return "cpu" in exp.platforms and exp.nr_devices <= len(jax.devices("cpu"))


def _inputs(entry: Entry, exp: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The entry's arguments (a native entry: ``arange`` per input aval), placed on the
    export's shardings over the first ``nr_devices`` CPU devices."""
    if entry.native:
        flat = [
            np.arange(int(np.prod(a.shape)), dtype=a.dtype).reshape(a.shape) for a in exp.in_avals
        ]
    else:
        flat = list(entry.data["inputs"])
    if exp.nr_devices > 1:
        shardings = _compat.in_shardings_on(exp, jax.devices("cpu"))
        flat = [jax.device_put(a, s) for a, s in zip(flat, shardings, strict=True)]
    return jax.tree.unflatten(exp.in_tree, flat)


def _assert_close(got: Sequence[Any], want: Sequence[Any], entry: Entry, what: str) -> None:
    rtol, atol = _tolerance(entry)
    assert len(got) == len(want), f"{entry.id}: {len(got)} outputs, {what} has {len(want)}"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, f"{entry.id} output {i} vs {what}"
        a = _DEFAULT_ATOL.get(w.dtype, 0.0) if atol is None else atol
        np.testing.assert_allclose(g, w, rtol=rtol, atol=a, err_msg=f"{entry.id} vs {what}")


_DTYPES = {"f32": np.float32, "f64": np.float64, "c64": np.complex64, "c128": np.complex128}


# jax's check_results for decompositions that are unique only up to order, sign or phase,
# ported from tests/export_back_compat_test.py (jax 0.10.2), for the entries they check.
def _check_eig(entry: Entry, got: Sequence[Any], want: Sequence[Any]) -> None:
    _, atol = _tolerance(entry)
    dtype = _DTYPES[entry.id.rsplit("/", 1)[-1]]
    n = 4
    operand = np.arange(n * n, dtype=dtype).reshape(n, n)
    eps = np.finfo(dtype).eps

    def check_right(a: Any, w: Any, v: Any) -> None:
        norm = np.linalg.norm(a @ v - w[None, :] * v) / ((n + 1) * eps)
        assert norm < 100, f"{entry.id}: eigenvectors off by {norm} (normalized)"

    w_run, w_exp = np.asarray(got[0]), np.asarray(want[0])
    for x, pool in ((w_run, w_exp), (w_exp, w_run)):
        for value in x:
            assert np.min(np.abs(pool - value)) <= atol, f"{entry.id}: eigenvalue {value}"
    check_right(np.conj(operand.T), np.conj(w_run), np.asarray(got[1]))
    check_right(operand, w_run, np.asarray(got[2]))


def _check_eigh(entry: Entry, got: Sequence[Any], want: Sequence[Any]) -> None:
    rtol, atol = _tolerance(entry)
    dtype = _DTYPES[entry.id.rsplit("/", 1)[-1]]
    operand = np.arange(64, dtype=dtype).reshape(8, 8)
    operand = (operand + np.conj(operand.T)) / 2.0
    v, w = np.asarray(got[0]), np.asarray(got[1])
    assert np.linalg.norm(np.eye(8) - np.conj(v.T) @ v) <= rtol, f"{entry.id}: not unitary"
    residual = np.linalg.norm(operand @ v - w[None, :].astype(v.dtype) * v)
    assert residual <= rtol * np.linalg.norm(operand), f"{entry.id}: residual {residual}"
    np.testing.assert_allclose(w, np.asarray(want[1]), rtol=rtol, atol=atol)


def _check_schur(entry: Entry, got: Sequence[Any], want: Sequence[Any]) -> None:
    rtol, atol = _tolerance(entry)
    t, s = np.asarray(got[0]), np.asarray(got[1])
    a = np.asarray(entry.data["inputs"][0])
    np.testing.assert_allclose(s @ t @ np.conj(s.T), a, rtol=rtol, atol=atol)


def _check_top_k(entry: Entry, got: Sequence[Any], want: Sequence[Any]) -> None:
    rtol, atol = _tolerance(entry)
    atol = _DEFAULT_ATOL[np.dtype(np.float32)] if atol is None else atol
    a = np.asarray(entry.data["inputs"][0])
    values, indices = np.asarray(got[0]), np.asarray(got[1])
    rows = np.arange(a.shape[0]).reshape(-1, 1)
    picked = a[rows, indices] if a.ndim == 2 else a[indices]
    np.testing.assert_allclose(values, picked, rtol=rtol, atol=atol)
    np.testing.assert_allclose(np.sort(values), np.sort(want[0]), rtol=rtol, atol=atol)


_CHECKS = {
    "cpu_eig_lapack_geev": _check_eig,
    "cpu_eigh_lapack_syev": _check_eigh,
    "cpu_schur_lapack_gees": _check_schur,
    "stablehlo_dynamic_top_k": _check_top_k,
    "stablehlo_dynamic_approx_top_k": _check_top_k,
}


def _check_expected(entry: Entry, got: Sequence[Any], want: Sequence[Any]) -> None:
    """The entry's expected outputs against ``got`` as jax's test checks them."""
    check = _CHECKS.get(entry.file)
    if check is None:
        _assert_close(got, want, entry, "the expected outputs")
    else:
        check(entry, got, want)


def _jax_call(entry: Entry, exp: Any) -> list[Any]:
    """jax's own call of the entry's module (``run_serialized``: pjit of ``Exported.call``)."""
    args, kwargs = _inputs(entry, exp)
    return jax.tree.leaves(jax.jit(exp.call)(*args, **kwargs))


@pytest.fixture(scope="module")
def built() -> dict[str, Any]:
    """Entry id -> its Exported (or the exception building it raised)."""
    out: dict[str, Any] = {}
    for entry in ENTRIES:
        try:
            out[entry.id] = _exported(entry)
        except Exception as e:  # reported by each test of the entry
            out[entry.id] = e
    return out


def _get(built: dict[str, Any], entry: Entry) -> Any:
    exp = built[entry.id]
    if isinstance(exp, Exception):
        raise AssertionError(f"{entry.id}: jax could not build the Exported: {exp!r}")
    return exp


def test_the_data_is_all_there():
    """The walk finds every entry jax ships (0.10.2: 142 CompatTestData, 17 native)."""
    assert len(ENTRIES) >= 150
    assert len({e.id for e in ENTRIES}) == len(ENTRIES)
    assert sum(e.native for e in ENTRIES) >= 17


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.id)
def test_archive(entry, built):
    exp = _get(built, entry)
    data = jaxport.dumps(exp)
    allowed = _trusted_targets(exp)
    back = jaxport.loads(data, allow_custom_calls=allowed)
    assert_exported_equal(exp, back)
    assert jaxport.dumps(back) == data
    info = jaxport.inspect(data)
    assert info.platforms == tuple(exp.platforms)
    assert info.nr_devices == exp.nr_devices
    assert info.calling_convention_version == exp.calling_convention_version
    assert len(info.in_avals) == len(exp.in_avals) and len(info.out_avals) == len(exp.out_avals)
    assert set(info.custom_call_targets) == _module_targets(exp)
    if not allowed:
        jaxport.loads(data)  # the default trust


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.id)
def test_run(entry, built):
    exp = _get(built, entry)
    if not _runs_here(exp):
        pytest.skip(
            f"{entry.id}: exported for {', '.join(exp.platforms)} on {exp.nr_devices} device(s);"
            " only CPU runs here"
        )
    if entry.native and entry.file not in _NATIVE_FUNCTIONS:
        pytest.skip(f"{entry.id}: jax's test does not run it on CPU, nothing to compare with")
    loaded = jaxport.loads(jaxport.dumps(exp), allow_custom_calls=_trusted_targets(exp))
    args, kwargs = _inputs(entry, exp)
    got = jax.tree.leaves(loaded.call(*args, **kwargs))
    _assert_close(got, _jax_call(entry, exp), entry, "jax's direct call")
    if entry.native:
        want = _NATIVE_FUNCTIONS[entry.file](*jax.tree.map(np.asarray, args))
    else:
        want = list(entry.data["expected_outputs"])
    _check_expected(entry, got, list(want))


def _golden(entry: Entry, exp: Any) -> list[jaxport.Example] | None:
    """The entry's inputs and expected outputs as golden examples for the audit to re-run,
    where jax's test compares them plainly (not where it checks a decomposition's
    properties: eig, eigh, Schur and top-k outputs are unique only up to order or phase)."""
    if entry.native or entry.file in _CHECKS or not _runs_here(exp):
        return None
    args, kwargs = _inputs(entry, exp)
    return [jaxport.Example(args, kwargs, list(entry.data["expected_outputs"]))]


@pytest.fixture(scope="module")
def registry_pushes(tmp_path_factory, built) -> tuple[Any, dict[str, Any]]:
    """One SQLite registry holding every entry that pushes: (registry, id -> push outcome)."""
    root = tmp_path_factory.mktemp("backcompat")
    reg = jaxport.Registry(f"sqlite:///{root / 'registry.db'}", blobs=root / "blobs")
    outcomes: dict[str, Any] = {}
    for i, entry in enumerate(ENTRIES):
        exp = built[entry.id]
        if isinstance(exp, Exception):
            outcomes[entry.id] = exp
            continue
        try:
            outcomes[entry.id] = reg.push(exp, f"entry-{i}", examples=_golden(entry, exp))
        except jaxport.JaxportError as e:
            outcomes[entry.id] = e
    yield reg, outcomes
    reg.close()


@pytest.fixture(scope="module")
def audit_findings(registry_pushes, monkeypatch_module) -> dict[str, list[Any]]:
    """Every pushed entry audited for each of its platforms in one worker, with x64 on."""
    reg, _ = registry_pushes
    monkeypatch_module.setenv("JAX_ENABLE_X64", "1")
    findings: dict[str, list[Any]] = {}
    for f in reg.audit(store=False):
        findings.setdefault(f.name, []).append(f)
    return findings


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def _pushed(registry_pushes: tuple[Any, dict[str, Any]], entry: Entry) -> Any:
    outcome = registry_pushes[1][entry.id]
    if isinstance(outcome, Exception):
        raise AssertionError(f"{entry.id}: push failed: {type(outcome).__name__}: {outcome}")
    return outcome


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.id)
def test_registry(entry, built, registry_pushes):
    exp = _get(built, entry)
    ref = _pushed(registry_pushes, entry)
    reg = registry_pushes[0]
    reference = f"{ref.name}:{ref.version}"
    pulled = reg.pull_bytes(reference, platform=exp.platforms[0], nr_devices=exp.nr_devices)
    assert pulled == jaxport.dumps(exp)


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.id)
def test_audit(entry, built, registry_pushes, audit_findings):
    exp = _get(built, entry)
    ref = _pushed(registry_pushes, entry)
    findings = {f.platform: f for f in audit_findings[ref.name]}
    assert set(findings) == set(exp.platforms)
    for platform, f in findings.items():
        if platform != "cpu" or not _runs_here(exp):
            assert f.status == "not-run", f"{entry.id} on {platform}: {f.status}: {f.reason}"
            continue
        try:
            _jax_call(entry, exp)
        except Exception as e:  # jax cannot run it: neither may the audit say ok
            assert f.status in ("compile-error", "error"), f"{entry.id}: jax: {e!r}; {f.reason}"
        else:
            assert f.status == "ok", f"{entry.id} on cpu: {f.status}: {f.reason}"
            if _golden(entry, exp) is not None:
                assert f.checks["golden"].startswith("1 example(s)"), f.checks
