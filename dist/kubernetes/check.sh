#!/usr/bin/env bash
# Checks dist/kubernetes/oi.yaml: every object against the Kubernetes 1.30
# schemas, strictly (kubernetes-validate from PyPI: unknown fields are
# errors), and the ConfigMap's rinetd.conf with `oi --check`, in a private
# mount namespace whose /etc/hosts gives the cluster's service names an
# address (there is no cluster DNS here).
# Usage: dist/kubernetes/check.sh [path/to/oi]   (default target/debug/oi)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
oi=$(readlink -f "${1:-$here/../../target/debug/oi}")
# Installed where it is missing into target/kubernetes-validate (pip
# --target): a Debian python refuses a system-wide pip install (PEP 668),
# and a private directory needs no venv package.
if ! command -v kubernetes-validate >/dev/null; then
    tools=$(readlink -f "$here/../../target")/kubernetes-validate
    [ -x "$tools/bin/kubernetes-validate" ] \
        || python3 -m pip install -q --disable-pip-version-check --target "$tools" kubernetes-validate
    export PATH="$tools/bin:$PATH" PYTHONPATH="$tools${PYTHONPATH:+:$PYTHONPATH}"
fi
kubernetes-validate -k 1.30.0 --strict "$here/oi.yaml"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$here/oi.yaml" "$work/rinetd.conf" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "ConfigMap"]
open(sys.argv[2], "w").write(docs[0]["data"]["rinetd.conf"])
PY
cat /etc/hosts > "$work/hosts"
printf '10.96.0.10 web.default.svc.cluster.local\n10.96.0.11 kube-dns.kube-system.svc.cluster.local\n' >> "$work/hosts"
unshare --mount sh -c 'mount --bind "$1" /etc/hosts && exec "$2" --check -c "$3"' sh \
    "$work/hosts" "$oi" "$work/rinetd.conf"
