"""The child of ``jaxport run`` (``jaxport._cli.runner.call_in_child``): one call, then exit.

``PYTHON -I -m jaxport._run_child WORKDIR``: reads ``WORKDIR/request.json`` (``archive``,
``method`` or null for a function archive, ``inputs``, ``allow_custom_calls``, optionally
``use_compiled``: count jax's persistent-cache hits into ``compiled.json``), loads the
archive and the inputs as ``jaxport run`` does, calls, and writes ``WORKDIR/out.npz`` (the
outputs) and
``WORKDIR/summaries.json`` (what ``run`` prints of them). Exit status 0: done; 2: jaxport
refused the call, ``WORKDIR/error.json`` holds ``{"type", "message", "attributes"}``. The
parent kills it at its time limit; it dies with its parent (``jaxport._children``).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["main"]


def main(workdir: str) -> int:
    """Runs the request in ``workdir``; the exit status."""
    work = Path(workdir)
    request = json.loads((work / "request.json").read_text())
    from jaxport import JaxportError
    from jaxport._standins import standins_allowed

    hits = _counting_cache_hits() if request.get("use_compiled") else None
    try:
        with standins_allowed():  # a whole process that imports none of the user's classes
            data, summaries = _call(request)
    except JaxportError as e:
        error = {"type": type(e).__name__, "message": str(e), "attributes": _attributes(e)}
        (work / "error.json").write_text(json.dumps(error))
        return 2
    (work / "out.npz").write_bytes(data)
    (work / "summaries.json").write_text(json.dumps([dataclasses.asdict(s) for s in summaries]))
    if hits is not None:
        (work / "compiled.json").write_text(json.dumps({"cache_hits": len(hits)}))
    return 0


def _counting_cache_hits() -> list[str]:
    """jax's persistent-cache hits from now on (``--use-compiled``: did the call load the
    executable jaxport wrote into the cache directory, or compile?)."""
    import jax

    hits: list[str] = []

    def on_event(event: str, **_: Any) -> None:
        if event == "/jax/compilation_cache/cache_hits":
            hits.append(event)

    jax.monitoring.register_event_listener(on_event)
    return hits


def _call(request: dict[str, Any]) -> tuple[bytes, list[Any]]:
    from jaxport._cli import runner as _cli_run
    from jaxport.export import inspect, load, load_model

    archive, inputs = Path(request["archive"]), Path(request["inputs"])
    allowed = tuple(request["allow_custom_calls"])
    method = request["method"]
    if inspect(archive).kind == "model":
        model = load_model(archive, allow_custom_calls=allowed)
        arrays = _cli_run.load_inputs(inputs, _cli_run.input_specs(model, method), method)
        result = _cli_run.call_method(model, method, arrays)
    else:
        exp = load(archive, allow_custom_calls=allowed)
        specs = _cli_run.function_specs(exp)
        arrays = _cli_run.load_inputs(inputs, specs, str(exp.fun_name), kind="function")
        result = _cli_run.call_function(exp, arrays, jit=bool(request.get("use_compiled")))
    outputs = _cli_run.output_arrays(result)
    return _cli_run.output_bytes(outputs), [_cli_run.summarize(n, a) for n, a in outputs.items()]


def _attributes(error: BaseException) -> dict[str, Any]:
    """The error's attributes that JSON carries (to rebuild it in the parent)."""
    out = {}
    for key, value in vars(error).items():
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            continue
        out[key] = value
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
