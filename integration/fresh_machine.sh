#!/usr/bin/env bash
# A new user's machine, as far as one can be made here: a fresh clone of HEAD, a fresh HOME
# (cold pip, numba and kernel caches), `env -i` with a minimal PATH, no pip configuration
# (PIP_CONFIG_FILE=/dev/null), a venv from `python3 -m venv` with its own pip; then README's two
# commands in the order a new user runs them (main job, then tests) in the same checkout, and
# TF_BACKEND=1 on an unmodified script. PIP_CERT passes through when set: on this workplace's
# machines HTTPS goes through a proxy whose CA only the system store has (not a pip setting
# that changes what gets installed). Usage: integration/fresh_machine.sh [PYTHON_DIR] [WORKDIR]
# (PYTHON_DIR holds the `python3` to use; default: the one on PATH). Prints wall times.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PYDIR="${1:-$(dirname "$(command -v python3)")}"
WORK="${2:-$(mktemp -d /tmp/tfb_fresh.XXXX)}"
mkdir -p "$WORK/home"
git clone -q "$REPO" "$WORK/checkout"
cd "$WORK/checkout"
readarray -t CMDS < <(grep -A1 '^```bash$' README.md | grep '^python3 -m venv')
run() {  # a command in the clean environment, timed
    local t0=$SECONDS
    env -i HOME="$WORK/home" PATH="$PYDIR:/usr/local/bin:/usr/bin:/bin" LANG=C.UTF-8 \
        PIP_CONFIG_FILE=/dev/null ${PIP_CERT:+PIP_CERT="$PIP_CERT"} TF_BACKEND="${TF_BACKEND_RUN:-}" bash -c "$1"
    local rc=$?
    echo "[fresh] rc=$rc in $((SECONDS - t0)) s: $1" >&2
    return $rc
}
echo "[fresh] $(lscpu | sed -n 's/^Model name: *//p'); python $("$PYDIR/python3" --version)" >&2
run "${CMDS[0]}"
run "${CMDS[1]}"
printf 'import tensorflow as tf\nprint(float(tf.reduce_sum(tf.nn.relu(tf.constant([1.0, -2.0]) * 3.0))))\n' > "$WORK/script.py"
TF_BACKEND_RUN=1 run ".venv/bin/python $WORK/script.py && TF_BACKEND_REPORT=- .venv/bin/python $WORK/script.py 2>&1 | grep -E 'backend|Mul|Relu' | head -5"
echo "[fresh] done: $WORK" >&2
