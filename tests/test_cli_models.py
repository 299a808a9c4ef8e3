"""The ``jaxport`` command on model archives: ``inspect``, ``run`` (from a file or the
registry), ``pull`` and ``show`` of a model; the installed script in a subprocess, as in
``test_cli.py`` (``COLUMNS=80``, no "Traceback" in any output)."""

from __future__ import annotations

import dataclasses
import json
import re

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from test_cli import base_env, fits, run

import jaxport
from jaxport._cli.output import FUNCTION_ONLY, to_json

METHODS = ("embed", "half", "logits")


def _logits(p, x):
    return x @ p["dense"]["w"] + p["dense"]["b"]


def _embed(p, ids, extra):
    vec = p["emb"][ids] * extra["scale"]
    return {"vec": vec, "total": jnp.sum(ids)}


def _half(p, x):
    return x * jnp.asarray(0.5, jnp.bfloat16), x.astype(jnp.float32)


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    """A model of three methods: ``logits`` (a symbolic batch), ``embed`` (pytree arguments
    and result) and ``half`` (bfloat16 in, a tuple out)."""
    rng = np.random.default_rng(0)
    params = {
        "dense": {"w": rng.normal(size=(4, 3)).astype(np.float32), "b": np.ones(3, np.float32)},
        "emb": rng.normal(size=(5, 2)).astype(np.float32),
    }
    (b,) = jax.export.symbolic_shape("b")
    specs = {
        "logits": [jax.ShapeDtypeStruct((b, 4), jnp.float32)],
        "embed": [
            jax.ShapeDtypeStruct((3,), jnp.int32),
            {"scale": jax.ShapeDtypeStruct((), jnp.float32)},
        ],
        "half": [jax.ShapeDtypeStruct((2,), jnp.bfloat16)],
    }
    fns = {"logits": _logits, "embed": _embed, "half": _half}
    model = jaxport.Model(params, fns, specs, vjp_order={"logits": 1, "embed": 0, "half": 0})
    path = tmp_path_factory.mktemp("model") / "tiny.jaxport"
    model.save(path)
    return path


@pytest.fixture
def env(tmp_path):
    return base_env(tmp_path)


def _savez(path, *arrays, **named):
    np.savez(path, *arrays, **named)
    return str(path)


# -- inspect --------------------------------------------------------------------------------


def test_inspect_lists_methods_and_parameters_in_80_columns(env, model_file):
    text = fits(
        run(env, "inspect", str(model_file)).out,
        "method", "signature", "platforms", "devices", "vjp", "path", "shape", "dtype", "bytes",
    )  # fmt: skip
    signatures = _column(text, "signature")
    assert "(float32[b,4]) -> float32[b,3]" in signatures
    assert "([0] int32[3], [1]['scale'] float32[]) -> (['total'] int32[], ['vec']" in signatures
    for path in ("['dense']['b']", "['dense']['w']", "['emb']"):
        assert path in text
    assert "3 tensor(s), 100 bytes" in text  # 12 + 48 + 40
    assert "logits vjp 1" in text  # the modules, by method


def test_what_a_model_leaves_out_of_its_json_is_empty(model_file, registry):
    """The FUNCTION_ONLY fields of a model's ArchiveInfo and VariantInfo hold nothing."""
    info = jaxport.inspect(model_file)
    variant = registry.get(str(registry.push(model_file, "m"))).variants[0]
    for data in (info, variant):
        names = {f.name for f in dataclasses.fields(data)}
        assert FUNCTION_ONLY & names
        assert not [f for f in FUNCTION_ONLY & names if getattr(data, f)], data
    known = {f.name for data in (info, variant) for f in dataclasses.fields(data)}
    assert known >= FUNCTION_ONLY  # no name that is no field


def _column(text, header):
    """The cells of the table column ``header``, folded lines joined by spaces."""
    lines = text.splitlines()
    top = next(i for i, line in enumerate(lines) if f" {header} " in line)
    index = (
        lines[top].split("┃").index(next(c for c in lines[top].split("┃") if c.strip() == header))
    )
    cells = []
    for line in lines[top + 2 :]:
        if not line.startswith("│"):
            break
        cells.append(line.split("│")[index].strip())
    return " ".join(cells)


#: What ``inspect --json`` of a model has (README, "The command line").
MODEL_KEYS = {
    "calling_convention_version", "custom_call_targets", "format_version", "header_length",
    "header_sha256", "jax_version", "jaxlib_version", "jaxport_version", "kind", "metadata",
    "methods", "modules", "nr_devices", "platforms", "sections", "tensors", "total_length",
    "vjp_order", "window",
}  # fmt: skip


def test_inspect_json_is_the_archive_info(env, model_file):
    doc = run(env, "inspect", str(model_file), "--json").json()
    assert doc == json.loads(json.dumps(to_json(jaxport.inspect(model_file))))
    assert doc["kind"] == "model"
    assert set(doc) == MODEL_KEYS  # a function's keys left out
    assert (doc["vjp_order"], doc["nr_devices"], doc["platforms"]) == (0, 1, ["cpu"])
    assert [m["name"] for m in doc["methods"]] == list(METHODS)
    logits = doc["methods"][2]
    assert logits["in_avals"][0]["shape"] == ["b", 4] and logits["vjp_order"] == 1
    assert [(t["path"], t["nbytes"]) for t in doc["tensors"]] == [
        ("['dense']['b']", 12), ("['dense']['w']", 48), ("['emb']", 40)
    ]  # fmt: skip


# -- run from a file ------------------------------------------------------------------------


def _expected(model_file, method, *args):
    from jax import tree_util

    result = jaxport.load_model(model_file).methods[method](*args)
    leaves = tree_util.tree_flatten_with_path(result)[0]
    return {f"out{tree_util.keystr(k)}": np.asarray(v) for k, v in leaves}


def _assert_outputs(path, expected):
    with np.load(path, allow_pickle=False) as npz:
        got = {k: npz[k] for k in npz.files}
    assert set(got) == set(expected)
    for name, value in expected.items():
        if value.dtype.kind == "V" or value.dtype == ml_dtypes.bfloat16:
            got[name] = got[name].view(value.dtype)  # .npz keeps ml_dtypes as raw bytes
        assert got[name].dtype == value.dtype, name
        np.testing.assert_array_equal(got[name], value)


def test_run_writes_what_the_method_returns(env, model_file, tmp_path):
    x = np.arange(20, dtype=np.float32).reshape(5, 4)
    inputs = _savez(tmp_path / "x.npz", x)
    text = fits(
        run(env, "run", str(model_file), "logits", "--input", inputs, cwd=tmp_path).out,
        "output", "shape", "dtype", "min", "max", "first values",
    )  # fmt: skip
    assert "wrote logits-out.npz" in text and "(5, 3)" in text
    expected = _expected(model_file, "logits", x)
    _assert_outputs(tmp_path / "logits-out.npz", expected)
    assert f"{expected['out'].max():.6g}" in text

    # the default output is not overwritten without --force
    refused = run(env, "run", str(model_file), "logits", "-i", inputs, "--json", code=1,
                  cwd=tmp_path).error()  # fmt: skip
    assert refused["type"] == "FileExistsError" and "--force" in refused["message"]
    run(env, "run", str(model_file), "logits", "-i", inputs, "--force", cwd=tmp_path)


def test_run_with_pytree_arguments_and_results(env, model_file, tmp_path):
    ids, scale = np.array([4, 0, 2], np.int32), np.float32(3.0)
    expected = _expected(model_file, "embed", ids, {"scale": scale})
    # positional leaves as numpy.savez(f, *arrays) names them, then keyed by inspect's paths
    for name, npz in (
        ("positional", _savez(tmp_path / "a.npz", ids, scale)),
        ("paths", _savez(tmp_path / "b.npz", **{"[1]['scale']": scale, "[0]": ids})),
    ):
        out = tmp_path / f"{name}.npz"
        doc = run(env, "run", str(model_file), "embed", "-i", npz, "-o", str(out), "--json").json()
        _assert_outputs(out, expected)
        assert doc["path"] == str(out) and doc["method"] == "embed"
        summary = {o["name"]: o for o in doc["outputs"]}
        assert set(summary) == {"out['total']", "out['vec']"}
        assert summary["out['total']"]["min"] == 6 and summary["out['vec']"]["shape"] == [3, 2]


def test_run_takes_bfloat16_as_numpy_writes_it(env, model_file, tmp_path):
    x = np.array([1.5, -4.0], ml_dtypes.bfloat16)
    npz = _savez(tmp_path / "x.npz", x)
    with np.load(npz) as f:
        assert f["arr_0"].dtype.kind == "V"  # what numpy.savez makes of bfloat16
    out = tmp_path / "out.npz"
    text = run(env, "run", str(model_file), "half", "-i", npz, "-o", str(out)).out
    _assert_outputs(out, _expected(model_file, "half", x))
    assert "out[0]" in text and "bfloat16" in text and "0.75, -2" in text


# -- run: wrong input -----------------------------------------------------------------------

RUN_ERRORS = [
    # (method, inputs (arrays, or a file to use), exit code, error type, words of the message)
    ("nope", "ok", 1, "RunError", "its methods: embed, half, logits"),
    ("logits", "two", 1, "RunError", "takes 1 input(s): [0] float32[b,4]; the file holds arr_0"),
    ("logits", "shape", 1, "RunError", "input arr_0 is float32[2,5], [0] must be float32[b,4]"),
    ("logits", "dtype", 1, "RunError", "input arr_0 is float64[2,4], [0] must be float32[b,4]"),
    ("embed", "names", 1, "RunError", "the file holds ids, scale"),
    ("logits", "padded", 1, "RunError", "the file holds arr_00"),
    ("logits", "pickle", 1, "RunError", "allow_pickle=False"),
    ("logits", "not-npz", 1, "RunError", "is not an .npz file"),
    ("embed", "leaf", 1, "RunError", "input arr_0 is int32[4], [0] must be int32[3]"),
]


def _inputs(kind, tmp_path, model_file):
    f32 = np.ones((2, 4), np.float32)
    arrays = {
        "ok": [f32],
        "two": [f32, f32],
        "shape": [np.ones((2, 5), np.float32)],
        "dtype": [np.ones((2, 4))],
        "pickle": [np.array([{}], dtype=object)],
        "leaf": [np.ones(4, np.int32), np.float32(1)],
    }
    if kind == "padded":
        return _savez(tmp_path / "in.npz", arr_00=f32)
    if kind == "names":
        return _savez(tmp_path / "in.npz", ids=np.ones(3, np.int32), scale=np.float32(1))
    if kind == "not-npz":
        return str(model_file)
    return _savez(tmp_path / "in.npz", *arrays[kind])


@pytest.mark.parametrize("method, kind, code, error, says", RUN_ERRORS, ids=lambda a: a)
def test_run_refuses_wrong_input_cleanly(env, model_file, tmp_path, method, kind, code, error,
                                         says):  # fmt: skip
    npz = _inputs(kind, tmp_path, model_file)
    out = str(tmp_path / "out.npz")
    text = run(env, "run", str(model_file), method, "-i", npz, "-o", out, code=code)
    assert text.out == "" and text.err.startswith(f"{error}: ") and says in text.err, text.err
    doc = run(env, "run", str(model_file), method, "-i", npz, "-o", out, "--json",
              code=code).error()  # fmt: skip
    assert doc["type"] == error and says in doc["message"]
    assert not (tmp_path / "out.npz").exists()


def test_run_refuses_what_it_cannot_run(env, tmp_path):
    fn = tmp_path / "sin.jaxport"
    exp = jax.export.export(jax.jit(jnp.sin))(jnp.zeros(4))
    jaxport.save(exp, fn)
    npz = _savez(tmp_path / "x.npz", np.zeros(4, np.float32))
    err = run(env, "run", str(fn), "apply", "-i", npz, code=1).err
    assert err == (
        f"RunError: {fn} is a function archive (sin), not a model: it has no method 'apply'; "
        "leave out METHOD\n"
    )
    for source, error in (
        (str(tmp_path / "missing.jaxport"), "FileNotFoundError"),
        ("missing.jaxport", "FileNotFoundError"),
        (str(tmp_path), "IsADirectoryError"),
    ):
        assert run(env, "run", source, "apply", "-i", npz, code=1).err.startswith(f"{error}: ")
    usage = run(env, "run", str(fn), "apply", "-i", npz, "--platform", "cpu", code=2).err
    assert "--platform" in usage
    assert "--input" in run(env, "run", str(fn), "apply", code=2).err


def test_run_says_why_jax_cannot_run_a_method(env, tmp_path):
    params = {"w": np.ones(2, np.float32)}
    tpu = jaxport.Model(params, lambda p, x: x * p["w"], [jax.ShapeDtypeStruct((2,), jnp.float32)],
                        platforms=["tpu"])  # fmt: skip
    tpu.save(tmp_path / "tpu.jaxport")
    npz = _savez(tmp_path / "x.npz", np.ones(2, np.float32))
    err = run(env, "run", str(tmp_path / "tpu.jaxport"), "apply", "-i", npz, code=1).err
    assert err.startswith("RunError: method 'apply' cannot run here: ") and "tpu" in err, err


def test_run_explains_itself(env):
    text = run(env, "run", "-h").out
    for words in ("SOURCE", "METHOD", "--input", "--output", "--force", "--platform", "--json"):
        assert words in text


# -- a model in the registry ----------------------------------------------------------------


@pytest.fixture
def reg_env(db_url, tmp_path):
    """The environment of a user whose registry is ``db_url`` with blobs in ``tmp/blobs``."""
    return {
        **base_env(tmp_path),
        "JAXPORT_REGISTRY": db_url,
        "JAXPORT_BLOBS": str(tmp_path / "blobs"),
    }


def test_a_model_in_the_registry(reg_env, model_file, tmp_path):
    env = reg_env
    run(env, "push", str(model_file), "--name", "lm", "--alias", "prod")
    x = np.ones((2, 4), np.float32)
    npz = _savez(tmp_path / "x.npz", x)
    expected = _expected(model_file, "logits", x)
    for reference, options in (("lm@prod", []), ("lm:1", ["--platform", "cpu", "--devices", "1"])):
        out = tmp_path / f"{reference.replace(':', '-')}.npz"
        run(env, "run", reference, "logits", "-i", npz, "-o", str(out), *options)
        _assert_outputs(out, expected)
    err = run(env, "run", "lm", "nope", "-i", npz, "-o", str(tmp_path / "n.npz"), code=1).err
    assert err.startswith("RunError: ") and "embed, half, logits" in err
    missing = run(env, "run", "unknown", "logits", "-i", npz, "--json", code=1).error()
    assert missing["type"] == "NotFoundError"

    # pull writes the model archive as pushed, byte for byte
    work = tmp_path / "work"
    work.mkdir()
    run(env, "pull", "lm@prod", cwd=work)
    assert (work / "lm-1.jaxport").read_bytes() == model_file.read_bytes()
    assert run(env, "inspect", str(work / "lm-1.jaxport"), "--json").json()["kind"] == "model"
    jax_format = run(env, "pull", "lm", "--format", "jax", cwd=work, code=1).err
    assert jax_format.startswith("WrongKindError: ") and "--format jax" in jax_format
    assert sorted(p.name for p in work.iterdir()) == ["lm-1.jaxport"]

    # show: the methods and parameters of a model variant
    text = fits(run(env, "show", "lm").out, "method", "signature", "path", "dtype", "bytes")
    assert "model: embed, half, logits" in text and "(float32[b,4]) -> float32[b,3]" in text
    assert "['dense']['w']" in text and "100" in text
    shown = run(env, "show", "lm", "--json").json()["ref"]
    (variant,) = shown["variants"]
    assert shown["kind"] == variant["kind"] == "model"
    assert [m["name"] for m in variant["methods"]] == list(METHODS)
    assert not {"fun_name", "in_signature", "out_signature"} & set(variant)
    assert variant["vjp_order"] == 0 and variant["calling_convention_version"] >= 9
    assert [t["path"] for t in variant["tensors"]] == [
        "['dense']['b']",
        "['dense']['w']",
        "['emb']",
    ]

    # a function has no methods
    fn = tmp_path / "sin.jaxport"
    jaxport.save(jax.export.export(jax.jit(jnp.sin))(jnp.zeros(4)), fn)
    run(env, "push", str(fn), "--name", "sin")
    wrong = run(env, "run", "sin", "apply", "-i", npz, "--json", code=1).error()
    assert wrong == {
        "type": "RunError",
        "message": "sin is a function archive (sin), not a model: it has no method 'apply'; "
        "leave out METHOD",
    }

    # ls and search: the kind in JSON, a model marked in the tables
    listed = run(env, "ls", "--json").json()
    assert [(r["name"], r["kind"]) for r in listed] == [("lm", "model"), ("sin", "function")]
    found = run(env, "search", "--json").json()
    assert [(v["name"], v["kind"]) for v in found] == [("lm", "model"), ("sin", "function")]
    assert "fun_name" not in found[0] and found[1]["fun_name"] == "sin"
    table = fits(run(env, "ls").out, "name", "version", "platforms", "devices", "created")
    assert re.search(r"│ lm \(model\) +│ 1 ", table) and re.search(r"│ sin +│ 1 ", table)
    table = fits(run(env, "search").out, "version", "platforms", "devices", "jax", "digest")
    # the mark may wrap under the version when a long jax release ("0.12.0.1") takes the width
    marked = r"│ lm:1 \(model\) +│|│ lm:1 +│.*\n│ \(model\) +│"
    assert re.search(marked, table) and re.search(r"│ sin:1 +│", table)


def test_no_line_ends_in_a_space_or_passes_80_columns(reg_env, model_file, tmp_path):
    """inspect and show of a function and a model, ls and search: rich pads table cells and
    titles to their width, which must not reach the output."""
    fn = tmp_path / "poly.jaxport"
    (b,) = jax.export.symbolic_shape("b")
    exp = jax.export.export(jax.jit(lambda x: {"y": jnp.sin(x)}), platforms=("cpu", "tpu"))(
        jax.ShapeDtypeStruct((b, 8), jnp.float32)
    )
    jaxport.save(exp, fn, vjp_order=1, metadata={"owner": "a-rather-long-team-name"})
    run(reg_env, "push", str(fn), "--name", "a-function-with-a-long-name", "--meta", "k=v")
    run(reg_env, "push", str(model_file), "--name", "a-model-with-a-long-name")
    for args in (
        ["inspect", str(fn)],
        ["inspect", str(model_file)],
        ["show", "a-function-with-a-long-name"],
        ["show", "a-model-with-a-long-name"],
        ["ls"],
        ["search"],
    ):
        out = run(reg_env, *args).out
        fits(out)
        lines = out.splitlines()
        assert len(lines) > 3, args
        assert not [line for line in lines if line != line.rstrip()], (args, out)


def test_pull_of_one_method(reg_env, model_file, tmp_path):
    """``pull --method`` writes one method as a function archive: ``method(params, *args)``,
    with the VJP orders the model stored for it."""
    env = reg_env
    run(env, "push", str(model_file), "--name", "lm")
    work = tmp_path / "work"
    work.mkdir()
    pulled = run(env, "pull", "lm", "--method", "logits", "--json", cwd=work).json()
    assert pulled["path"] == "lm-1-logits.jaxport" and pulled["format"] == "jaxport"
    exported = jaxport.load(work / "lm-1-logits.jaxport")
    model = jaxport.load_model(model_file)
    x = np.ones((2, 4), np.float32)
    np.testing.assert_allclose(exported.call(model.params, x), model.logits(x), rtol=1e-6)
    run(env, "pull", "lm", "--method", "embed", "--format", "jax", cwd=work)
    native = jax.export.deserialize(bytearray((work / "lm-1-embed.jaxexport").read_bytes()))
    assert native.in_avals == model.exported["embed"].in_avals

    unknown = run(env, "pull", "lm", "--method", "nope", "--json", code=1, cwd=work).error()
    assert unknown["type"] == "NotFoundError" and "embed, half, logits" in unknown["message"]
    fn = tmp_path / "sin.jaxport"
    jaxport.save(jax.export.export(jax.jit(jnp.sin))(jnp.zeros(4)), fn)
    run(env, "push", str(fn), "--name", "sin")
    wrong = run(env, "pull", "sin", "--method", "apply", code=1, cwd=work).err
    assert wrong.startswith("WrongKindError: ") and "no method 'apply'" in wrong
    whole = run(env, "pull", "lm", "--format", "jax", code=1, cwd=work).err
    assert "pull one method with --method" in whole


# -- run: binding inputs by name --------------------------------------------------------------


def _masked(p, batch):
    return batch["x"] * batch["mask"] + p["b"]


@pytest.fixture(scope="module")
def dict_model(tmp_path_factory):
    """A model whose method takes one dict ``{"x", "mask"}``: jax flattens it in sorted-key
    order (``mask`` first), not the order a caller writes it in."""
    spec = {"x": jax.ShapeDtypeStruct((3,), jnp.float32),
            "mask": jax.ShapeDtypeStruct((3,), jnp.float32)}  # fmt: skip
    model = jaxport.Model({"b": np.float32(0.5)}, _masked, [spec])
    path = tmp_path_factory.mktemp("dict") / "masked.jaxport"
    model.save(path)
    return path


def test_run_never_binds_dict_inputs_by_a_guessed_order(env, dict_model, tmp_path):
    # regression: numpy.savez(f, *batch.values()) was bound in sorted-key order: wrong numbers
    x, mask = np.array([1.0, 2.0, 3.0], np.float32), np.array([0.0, 1.0, 0.0], np.float32)
    positional = _savez(tmp_path / "pos.npz", x, mask)
    doc = run(env, "run", str(dict_model), "apply", "-i", positional, "-o",
              str(tmp_path / "out.npz"), "--json", code=1).error()  # fmt: skip
    assert doc["type"] == "RunError" and "name the arrays mask, x" in doc["message"]
    assert "[0]['mask'], [0]['x']" in doc["message"] and "a guess" in doc["message"]
    assert not (tmp_path / "out.npz").exists()
    expected = {"out": x * mask + np.float32(0.5)}
    for name, named in (
        ("keys", {"x": x, "mask": mask}),
        ("paths", {"[0]['x']": x, "[0]['mask']": mask}),
        ("mixed", {"[0]['x']": x, "mask": mask}),
    ):
        out = tmp_path / f"{name}.npz"
        run(env, "run", str(dict_model), "apply", "-i", _savez(tmp_path / f"{name}-in.npz",
            **named), "-o", str(out))  # fmt: skip
        _assert_outputs(out, expected)


@pytest.mark.parametrize(
    "named",
    [{"x": 1, "[0]['x']": 1, "mask": 1}, {"x": 1}, {"x": 1, "mask": 1, "y": 1}],
    ids=["twice", "missing", "extra"],
)
def test_run_refuses_names_that_do_not_bind_each_input_once(env, dict_model, tmp_path, named):
    arrays = {k: np.ones(3, np.float32) for k in named}
    npz = _savez(tmp_path / "in.npz", **arrays)
    text = run(env, "run", str(dict_model), "apply", "-i", npz, code=1, cwd=tmp_path).err
    assert text.startswith("RunError: ") and "takes 2 input(s)" in text
    assert "name the arrays mask, x" in text


# -- custom pytree nodes the command has not registered -------------------------------------

_REGISTERED_NODE = """
import sys, typing
import jax, jax.export, jax.numpy as jnp, numpy as np
import jaxport

class Pair(typing.NamedTuple):
    w: typing.Any
    b: typing.Any

jax.export.register_namedtuple_serialization(Pair, serialized_name="user.Pair")
params = Pair(np.full((4, 3), 0.5, np.float32), np.ones(3, np.float32))
model = jaxport.Model(params, lambda p, x: x @ p.w + p.b, [jax.ShapeDtypeStruct((2, 4),
                      jnp.float32)])
model.save(sys.argv[1])
"""


def test_a_registered_node_passes_the_command_as_a_stand_in(env, tmp_path):
    """The command imports no user class: a node the writer registered is read as a stand-in
    (run, push, audit, verify --deep all pass) and written back byte for byte."""
    import subprocess
    import sys

    path = tmp_path / "pair.jaxport"
    subprocess.run([sys.executable, "-P", "-c", _REGISTERED_NODE, str(path)], check=True,
                   env=env)  # fmt: skip
    x = np.ones((2, 4), np.float32)
    out = tmp_path / "out.npz"
    run(env, "run", str(path), "apply", "-i", _savez(tmp_path / "x.npz", x), "-o", str(out))
    _assert_outputs(out, {"out": x @ np.full((4, 3), 0.5, np.float32) + 1})
    run(env, "push", str(path), "--name", "pair")
    (finding,) = run(env, "audit", "run", "pair", "--json").json()["findings"]
    assert finding["status"] == "ok", finding
    report = run(env, "verify", "--deep", "--json").json()
    assert report["invalid"] == [] and report["corrupt"] == [], report
    run(env, "pull", "pair", "-o", str(tmp_path / "back.jaxport"))
    assert (tmp_path / "back.jaxport").read_bytes() == path.read_bytes()
    with pytest.raises(jaxport.UnsupportedFeatureError, match=r"user\.Pair"):
        jaxport.load_model(path)  # this process registered nothing: refused, naming it
