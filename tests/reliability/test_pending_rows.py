"""gc beside a push that runs in another PID namespace on the same host name.

Pending rows name the host and pid of their push; gc drops the rows of a pid that does not run
"here" and then collects their blobs. Containers can share a host name and still have PID
namespaces of their own (Kubernetes pods with ``hostNetwork: true`` take the node's name;
``docker run --uts=host``): a pid is only meaningful in its namespace. This test runs a push in
a new PID namespace (``unshare``), stops it between its blob write and its commit
(``_gated_push.py``), runs gc outside, lets the push commit, and checks that nothing was lost.
It skips where ``unshare`` is not permitted.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

import jaxport

HELPER = Path(__file__).with_name("_gated_push.py")
#: Tried in turn: as root, then in a user namespace of its own (unprivileged).
UNSHARE = (
    ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc"],
    ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--kill-child", "--mount-proc"],
)
#: The namespace's pid 1 (a shell) starts 100 short processes first, so the push's pid (102)
#: is past the low pids that kernel threads hold outside.
_SPACER = 'i=0; while [ $i -lt 100 ]; do /bin/true; i=$((i+1)); done; "$@"'


def _unshare() -> list[str] | None:
    for prefix in UNSHARE:
        try:
            subprocess.run([*prefix, "true"], check=True, capture_output=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            continue
        return prefix
    return None


def _runs_here(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@pytest.mark.slow
def test_gc_keeps_the_blob_of_a_push_in_another_pid_namespace(db_url, tmp_path):
    prefix = _unshare()
    if prefix is None:
        pytest.skip("unshare --pid is not permitted here")
    archive = jaxport.dumps(jax.export.export(jax.jit(jnp.sin))(jnp.zeros(3, jnp.float32)))
    digest = hashlib.sha256(archive).hexdigest()
    blobs, gate, source = tmp_path / "blobs", tmp_path / "gate", tmp_path / "sin.jaxport"
    source.write_bytes(archive)
    jaxport.Registry(db_url, blobs=blobs).close()
    helper = [sys.executable, str(HELPER), db_url, str(blobs), str(source), str(gate)]
    proc = subprocess.Popen(
        [*prefix, "sh", "-c", _SPACER, "sh", *helper],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        written = proc.stdout.readline().split()
        assert written[:1] == ["written"], proc.stderr.read()
        if _runs_here(int(written[1])):
            pytest.skip(f"pid {written[1]} of the namespace also runs outside it")
        with jaxport.Registry(db_url, blobs=blobs) as reg:
            report = reg.gc(min_age=0)
            gate.touch()
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
            assert "pushed gated:1" in out
            assert reg.verify().ok, "gc deleted the blob of a push in flight"
            assert reg.pull_bytes("gated:1", platform=None) == archive
            assert report.kept_pending == (digest,)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
