#!/usr/bin/env bash
# Record a real llama.cpp server's /metrics pages, offline, on CPU (no GPU, no model download).
#
#   scripts/capture_llamacpp_metrics.sh [WORKDIR]     (default WORKDIR: /tmp/llamacpp-capture)
#
# 1. llama.cpp's source comes from the llama-cpp-python sdist on PyPI (it vendors llama.cpp,
#    with a one-commit .git, so the build knows its commit, and the vocab-only test models).
# 2. Only the llama-server target is built (CPU, -j2: ~15 minutes on a 2-core machine).
# 3. scripts/tiny_llama_gguf.py writes a 17 MB llama model with random weights and a real
#    vocabulary (models/ggml-vocab-llama-spm.gguf): it answers gibberish, but the server loads,
#    prefills, caches prompts and decodes as for any model.
# 4. llama-server --metrics runs on loopback; the same prompt is sent three times (so the
#    prompt cache is hit), then a streamed chat and a completion; one page is taken while one
#    long request runs and another waits for the single slot ("busy"), one after ("idle").
# The pages land in WORKDIR as llamacpp-<commit>-{busy,idle}.prom with a first comment line
# naming the release; copy them to tests/signals/pages/ unchanged apart from that line.
# Nothing built or downloaded here is committed.
set -euo pipefail

WORK=${1:-/tmp/llamacpp-capture}
REPO=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-$REPO/.venv/bin/python}
VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
PORT=${PORT:-18417}
mkdir -p "$WORK"
cd "$WORK"

if [ ! -d "llama_cpp_python-$VERSION" ]; then
    "$PYTHON" -m pip download --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d .
    tar xzf "llama_cpp_python-$VERSION.tar.gz"
fi
SRC=$WORK/llama_cpp_python-$VERSION/vendor/llama.cpp
SERVER=$SRC/build/bin/llama-server
if [ ! -x "$SERVER" ]; then
    cmake -S "$SRC" -B "$SRC/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF -DGGML_OPENMP=OFF
    cmake --build "$SRC/build" --target llama-server -j2
fi
COMMIT=$(git -C "$SRC" rev-parse --short HEAD)
VERSION_LINE=$("$SERVER" --version 2>&1 | grep '^version:')

MODEL=$WORK/tiny-llama-random.gguf
[ -f "$MODEL" ] || PYTHONPATH=$SRC/gguf-py "$PYTHON" "$REPO/scripts/tiny_llama_gguf.py" \
    "$SRC/models/ggml-vocab-llama-spm.gguf" "$MODEL"

# One slot, so a second long request waits (requests_deferred); a 1-thread server, bounded.
timeout 600 "$SERVER" -m "$MODEL" --host 127.0.0.1 --port "$PORT" --metrics -c 2048 -np 1 \
    -t 1 --alias tiny >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
trap 'kill "$SERVER_PID" 2>/dev/null || true' EXIT
URL=http://127.0.0.1:$PORT
for _ in $(seq 1 120); do
    curl -sf "$URL/health" >/dev/null && break
    sleep 0.5
done

post() { curl -sf "$URL$1" -H 'Content-Type: application/json' -d "$2" >/dev/null; }
PROMPT="The quick brown fox jumps over the lazy dog and keeps running through the forest."
CHAT="{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"$PROMPT\"}],\"max_tokens\":16}"
for _ in 1 2 3; do post /v1/chat/completions "$CHAT"; done
post /v1/chat/completions "{\"model\":\"tiny\",\"stream\":true,\"stream_options\":{\"include_usage\":true},\"messages\":[{\"role\":\"user\",\"content\":\"$PROMPT Again.\"}],\"max_tokens\":8}"
post /v1/completions "{\"model\":\"tiny\",\"prompt\":\"$PROMPT\",\"max_tokens\":8}"

LONG="{\"model\":\"tiny\",\"prompt\":\"$PROMPT\",\"max_tokens\":1900,\"ignore_eos\":true}"
post /v1/completions "$LONG" & LONG1=$!
post /v1/completions "$LONG" & LONG2=$!
header="# llama.cpp server $VERSION_LINE (llama-cpp-python $VERSION sdist, tools/server, --metrics), recorded on CPU with a random-weight tiny llama model"
busy=""
for _ in $(seq 1 400); do
    page=$(curl -sf "$URL/metrics" || true)
    if grep -q '^llamacpp:requests_processing 1' <<<"$page" \
        && grep -q '^llamacpp:requests_deferred 1' <<<"$page"; then
        busy=$page
        break
    fi
    sleep 0.05
done
[ -n "$busy" ] || { echo "never saw one request running and one waiting" >&2; exit 1; }
printf '%s; one request running, one waiting\n%s\n' "$header" "$busy" >"llamacpp-$COMMIT-busy.prom"
wait "$LONG1" "$LONG2"
printf '%s; idle after the traffic\n%s\n' "$header" "$(curl -sf "$URL/metrics")" \
    >"llamacpp-$COMMIT-idle.prom"
echo "recorded $WORK/llamacpp-$COMMIT-busy.prom and $WORK/llamacpp-$COMMIT-idle.prom"
