#!/usr/bin/env bash
# Validates the committed CRD manifests against the Kubernetes API schemas, offline, with
# kubernetes-validate (PyPI). Installs it into a virtualenv under
# ${XDG_CACHE_HOME:-$HOME/.cache}/kanon/ on first use.
#
# usage: scripts/validate-manifests.sh [FILE...]
#   FILE defaults to crds/*.yaml and charts/kanon/crds/*.yaml, with their openreports/
#   subfolders (the OpenReports CRDs).
# env:   KUBERNETES_VERSION          schema version to validate against (default 1.35.0)
#        KUBERNETES_VALIDATE_VERSION kubernetes-validate release to install (default 1.37.0)
# Exits non-zero when a manifest does not validate or the tool cannot be installed.
set -euo pipefail

KUBERNETES_VERSION="${KUBERNETES_VERSION:-1.35.0}"
KUBERNETES_VALIDATE_VERSION="${KUBERNETES_VALIDATE_VERSION:-1.37.0}"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${XDG_CACHE_HOME:-$HOME/.cache}/kanon/kubernetes-validate-${KUBERNETES_VALIDATE_VERSION}"
tool="$venv/bin/kubernetes-validate"

if ! "$tool" --version >/dev/null 2>&1; then
    command -v python3 >/dev/null || { echo "error: python3 is required" >&2; exit 2; }
    echo "installing kubernetes-validate ${KUBERNETES_VALIDATE_VERSION} into $venv" >&2
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    python3 -m venv "$venv" || {
        echo "error: python3 -m venv failed (on Debian: apt-get install python3-venv)" >&2
        exit 2
    }
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        "kubernetes-validate==${KUBERNETES_VALIDATE_VERSION}"
fi

cd "$root"
if [ "$#" -gt 0 ]; then
    files=("$@")
else
    shopt -s nullglob
    files=(crds/*.yaml crds/openreports/*.yaml charts/kanon/crds/*.yaml charts/kanon/crds/openreports/*.yaml)
    shopt -u nullglob
fi
if [ "${#files[@]}" -eq 0 ]; then
    echo "error: no manifests to validate (run \`cargo xtask crds\`)" >&2
    exit 2
fi

# --strict rejects fields the API schema does not know (a typo in the CRD spec, for one).
exec "$tool" --strict --kubernetes-version "$KUBERNETES_VERSION" "${files[@]}"
