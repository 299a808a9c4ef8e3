#!/usr/bin/env bash
# Fills the audit matrix of a registry: `jaxport audit` under several jax releases (a venv
# each, shared with scripts/test_jax_versions.sh), then prints variants x jax releases.
#
#   scripts/audit_matrix.sh REGISTRY_URL BLOBS [VERSION ...]   (default: 0.7.0 0.8.3 0.9.2 0.10.2 0.11.2 0.12.0.1)
#
# Each release's findings are stored in the registry, so `jaxport audit upgrade VERSION`
# answers "what breaks if we move to that jax" afterwards.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
URL=${1:?usage: audit_matrix.sh REGISTRY_URL BLOBS [VERSION ...]}
BLOBS=${2:?usage: audit_matrix.sh REGISTRY_URL BLOBS [VERSION ...]}
shift 2
VERSIONS=("$@")
[ ${#VERSIONS[@]} -gt 0 ] || VERSIONS=(0.7.0 0.8.3 0.9.2 0.10.2 0.11.2 0.12.0.1)
PYTHON=${PYTHON:-python3}
# shellcheck source=scripts/jax_python.sh
. "$ROOT/scripts/jax_python.sh"  # jax >= 0.11 needs Python >= 3.12: python_for_jax picks one
VENVS="$ROOT/.jax-venvs"
mkdir -p "$VENVS"

for v in "${VERSIONS[@]}"; do
  venv="$VENVS/jax-$v"
  [ -x "$venv/bin/python" ] || "$(python_for_jax "$v")" -m venv "$venv"
  "$venv/bin/pip" install -q "jax==$v" "jaxlib==$v" "$ROOT[postgres]"
  "$venv/bin/pip" install -q --no-deps --force-reinstall "$ROOT"
  echo "== jax $v"
  # Exit status 1 means "some variant is not ok": that is a finding, not a failure here.
  "$venv/bin/python" -m jaxport._cli --registry "$URL" --blobs "$BLOBS" audit run --platform cpu || true
done
"$VENVS/jax-${VERSIONS[-1]}/bin/python" -m jaxport._cli --registry "$URL" --blobs "$BLOBS" audit matrix
