#!/usr/bin/env bash
# The install users do, tested as they use it (issue 24): the wheel, never the checkout.
#
# 1. `pip wheel --no-deps .`, installed with no extras into a fresh venv: the README's quick
#    start runs verbatim in an empty directory; each optional capability is one line naming its
#    extra, exit 1, no traceback; a read-only command creates no database.
# 2. A server from `[server]` in a venv of its own (the README's "local team server" lines), and
#    a client from `[client]` alone that runs the README's token and CI lines (push, alias, ls,
#    pull, log) with only JAXPORT_REGISTRY and JAXPORT_TOKEN set.
# Everything runs under a temporary directory, the server on 127.0.0.1 only.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PYTHON=${PYTHON:-python3}
WORK=$(mktemp -d)
SERVER_PID=
cleanup() {
    if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

fail() { echo "wheel install: FAILED: $*" >&2; exit 1; }

# The fenced bash block of README.md that holds a line containing $1, or the first block after
# a line outside blocks that does (a heading).
readme_block() {
    awk -v pat="$1" '
        /^```bash$/ { inside = 1; buf = ""; hit = after; next }
        inside && /^```$/ { if (hit) { printf "%s", buf; exit } inside = 0; next }
        inside { buf = buf $0 "\n"; if (index($0, pat)) hit = 1; next }
        index($0, pat) { after = 1 }
    ' "$ROOT/README.md"
}

echo "== wheel"
"$PYTHON" -m pip wheel -q --no-deps . -w "$WORK/dist"
WHEEL=$(ls "$WORK"/dist/jaxport-*.whl)

venv() {  # venv DIR SPEC: a fresh venv with SPEC installed
    "$PYTHON" -m venv "$1"
    "$1/bin/python" -m pip install -q --upgrade pip
    "$1/bin/python" -m pip install -q "$2"
}

echo "== no extras: pip install jaxport"
venv "$WORK/plain" "$WHEEL"
mkdir "$WORK/qs"
(
    cd "$WORK/qs"
    export PATH="$WORK/plain/bin:$PATH" JAXPORT_HOME="$WORK/qs/home" COLUMNS=80
    unset JAXPORT_REGISTRY JAXPORT_BLOBS JAXPORT_TOKEN
    jaxport ls >ls.out 2>ls.err && fail "ls before any push succeeded"
    grep -q "NotFoundError: no registry database at $WORK/qs/home/registry.db" ls.err \
        || fail "ls before any push: $(cat ls.err)"
    [ ! -e home/registry.db ] || fail "a read-only ls created the database"
    readme_block "## Quick start" | grep -v '^pip ' >quickstart.sh
    [ "$(wc -l <quickstart.sh)" -eq 4 ] || fail "the quick start is not 4 commands"
    bash -euo pipefail quickstart.sh >qs.out 2>qs.err || fail "quick start: $(cat qs.err)"
    grep -q "pushed tanh:1" qs.out && grep -q "0.761594" qs.out || fail "quick start output"
    ! grep -q Traceback qs.err || fail "quick start printed a traceback"

    # Each capability without its extra: one line naming the extra, exit 1.
    expect_extra() {  # EXTRA COMMAND...
        local extra=$1; shift
        if "$@" >x.out 2>x.err; then fail "$* succeeded without [$extra]"; fi
        [ "$(wc -l <x.err)" -eq 1 ] || fail "$*: not one line: $(cat x.err)"
        grep -q "jaxport\[$extra\]" x.err || fail "$*: names no [$extra]: $(cat x.err)"
    }
    expect_extra server jaxport serve
    expect_extra client env JAXPORT_REGISTRY=http://127.0.0.1:9 jaxport ls
    expect_extra client jaxport --registry https://127.0.0.1:9 pull tanh@prod
    expect_extra s3 jaxport --blobs s3://bucket/prefix ls
    expect_extra postgres jaxport --registry postgresql+psycopg://u@127.0.0.1:9/db --blobs b ls
    openssl ecparam -name prime256v1 -genkey -noout -out key.pem 2>/dev/null || echo x >key.pem
    expect_extra signing jaxport sign tanh.jaxport --key key.pem
    python - <<'EOF' || fail "the Python API without extras"
import jax, jaxport
from jaxport import MissingExtraError, UnsupportedFeatureError
spec = {"x": jax.ShapeDtypeStruct((1,), "float32")}
for extra, call in [
    ("orbax", lambda: jaxport.Model.from_orbax("ckpt", lambda p, x: x, spec)),
    ("safetensors", lambda: jaxport.Model.from_safetensors("t", lambda p, x: x, spec)),
    ("client", lambda: jaxport.Registry("http://127.0.0.1:9")),
]:
    try:
        call()
    except UnsupportedFeatureError as e:
        assert f"jaxport[{extra}]" in str(e), e
    else:
        raise AssertionError(extra)
assert jaxport.Registry().list("tanh")[0].version == 1
EOF
) || exit 1
echo "   quick start ok; serve, client, s3, postgres, signing, orbax, safetensors: one line each"

echo "== a server from [server], a client from [client] with only the environment"
venv "$WORK/server" "$WHEEL[server]"
venv "$WORK/client" "$WHEEL[client]"
PORT=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir "$WORK/team"
cd "$WORK/team"
# The README's local team server, on a free port.
readme_block "A local team server on SQLite" | grep -E '^(mkdir|jaxport)' \
    | sed "s/--port 8000/--port $PORT/" >server.sh
grep -q "token create admin" server.sh || fail "no token line in the README's server block"
ADMIN=$(PATH="$WORK/server/bin:$PATH" bash -euo pipefail -c "$(sed -n '1,2p' server.sh)" 2>/dev/null)
[[ $ADMIN == jxp_* ]] || fail "token create printed no secret"
PATH="$WORK/server/bin:$PATH" bash -c "exec $(sed -n '3p' server.sh)" >server.log 2>&1 &
SERVER_PID=$!
URL="http://127.0.0.1:$PORT"
for _ in $(seq 100); do
    curl -fsS "$URL/api/v1/names" -H "Authorization: Bearer $ADMIN" >/dev/null 2>&1 && break
    kill -0 "$SERVER_PID" 2>/dev/null || fail "the server exited: $(cat server.log)"
    sleep 0.2
done
curl -fsS "$URL/api/v1/docs" | grep -q swagger-ui || fail "/api/v1/docs"
"$WORK/client/bin/python" -c 'import fastapi' 2>/dev/null && fail "[client] installed fastapi"
"$WORK/client/bin/python" -c "
import jax, jax.numpy as jnp, jaxport
jaxport.save(jax.export.export(jax.jit(jnp.sin))(jnp.zeros(4)), 'encoder.jaxport')"
# The README's admin and CI lines, with the made-up address and secret replaced by real ones.
readme_block "An admin (JAXPORT_TOKEN: the admin's)" | grep -E '^(jaxport|export)' \
    | sed "s#https://reg:8000#$URL#g" >client.sh
(
    export PATH="$WORK/client/bin:$PATH" COLUMNS=80 JAXPORT_TOKEN=$ADMIN
    unset JAXPORT_REGISTRY
    CI_TOKEN=
    while IFS= read -r line; do
        line=${line//jxp_.../$CI_TOKEN}
        if [[ $line == export* ]]; then eval "$line"; continue; fi
        out=$(eval "$line" 2>err.txt) || fail "$line: $(cat err.txt)"
        ! grep -q Traceback err.txt || fail "$line printed a traceback"
        if [[ $line == *"token create ci-vision"* ]]; then CI_TOKEN=$out; fi
        printf '%s\n' "$out" >>client.out
    done <client.sh
    [[ $CI_TOKEN == jxp_* ]] || fail "no CI token"
    grep -q "vision-encoder" client.out || fail "ls/log show no vision-encoder"
    cmp encoder.jaxport encoder-prod.jaxport || fail "the pulled archive differs"
    # The CI token is limited to vision-: another name is refused, exit 1, one line.
    if JAXPORT_REGISTRY=$URL JAXPORT_TOKEN=$CI_TOKEN jaxport push encoder.jaxport --name other \
        >x.out 2>x.err; then fail "a vision- token pushed another name"; fi
    grep -q "PermissionDeniedError" x.err || fail "refusal: $(cat x.err)"
) || exit 1
grep -q Traceback server.log && fail "the server logged a traceback: $(cat server.log)"
echo "   token create/list, push, alias, ls, pull (byte-identical), log through the server: ok"
echo "wheel install: ok"
