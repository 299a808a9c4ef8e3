# Sourced by scripts/test_jax_versions.sh and scripts/audit_matrix.sh: which Python interpreter
# a jax release's venv is made with.
#
#   python_for_jax VERSION    prints the interpreter's path, or fails with a message
#
# jax 0.11.0 and later need Python >= 3.12 (their wheels say Requires-Python >=3.12); older ones
# run on $PYTHON (default python3, 3.11 in CI). The rule, first match wins:
#   1. $PY_FOR_<MAJOR>_<MINOR> (PY_FOR_0_11=/usr/bin/python3.12): that interpreter, as given;
#   2. release < 0.11: $PYTHON;
#   3. release >= 0.11: $PYTHON when it is >= 3.12, else pyenv's oldest 3.12 or 3.13
#      ($PYENV_ROOT/versions/3.1[23].*, PYENV_ROOT default /root/.pyenv, as on the CI machine),
#      else python3.12 or python3.13 on PATH.
# No interpreter found is an error naming what was looked for (never a silent skip).

py_minor() {  # the interpreter's minor version (3.12 -> 12), or nothing when it cannot run
  "$1" -c 'import sys; print(sys.version_info[1] if sys.version_info[0] == 3 else 0)' 2>/dev/null
}

python_for_jax() {
  local version=$1 major minor override candidate
  major=${version%%.*}
  minor=${version#*.}
  minor=${minor%%.*}
  override="PY_FOR_${major}_${minor}"
  if [ -n "${!override:-}" ]; then
    echo "${!override}"
    return
  fi
  local python=${PYTHON:-python3}
  if [ "$major" -eq 0 ] && [ "$minor" -lt 11 ]; then
    echo "$python"
    return
  fi
  if [ "$(py_minor "$python")" -ge 12 ] 2>/dev/null; then
    command -v "$python"
    return
  fi
  for candidate in $(ls -d "${PYENV_ROOT:-/root/.pyenv}"/versions/3.1[23].* 2>/dev/null | sort -V) \
    $(command -v python3.12 python3.13 2>/dev/null); do
    [ -d "$candidate" ] && candidate="$candidate/bin/python"
    if [ -x "$candidate" ] && [ "$(py_minor "$candidate")" -ge 12 ] 2>/dev/null; then
      echo "$candidate"
      return
    fi
  done
  echo "jax $version needs Python >= 3.12: none found (\$PYTHON=$python is older; looked in" \
    "${PYENV_ROOT:-/root/.pyenv}/versions/3.12.*, 3.13.* and for python3.12, python3.13 on" \
    "PATH); set PY_FOR_${major}_${minor}=/path/to/python3.12" >&2
  return 1
}
