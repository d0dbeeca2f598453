#!/usr/bin/env bash
# `npm start`: provision, start a whole local vmop in the background, and boot the example VM.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/provision.sh
bin/vmop dev up
kubeconfig="$(bin/vmop dev status -o json | node -e 'process.stdin.on("data", d => console.log(JSON.parse(d).kubeconfig))')"
kubectl --kubeconfig "$kubeconfig" apply -f examples/test-guest.yaml
echo "Waiting for the example VM to run (kubectl --kubeconfig $kubeconfig get vm -A -w to watch it yourself)..."
for _ in $(seq 1 120); do
  phase="$(kubectl --kubeconfig "$kubeconfig" get vm test-guest -o jsonpath='{.status.phase}' 2>/dev/null || true)"
  [[ "$phase" == "Running" ]] && break
  sleep 1
done
kubectl --kubeconfig "$kubeconfig" get vm -A
