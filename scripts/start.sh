#!/usr/bin/env bash
# `npm start`: provision, start a whole local vmop in the background, and boot the example VM.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/provision.sh
bin/vmop dev up
kubeconfig="$(bin/vmop dev status -o json | node -e 'process.stdin.on("data", d => console.log(JSON.parse(d).kubeconfig))')"
# A key pair of the dev environment's: the example VM's cloud-init installs its public key.
key="${VMOP_DEV_DIR:-$HOME/.vmop/dev}/id_ed25519"
[[ -f "$key" ]] || ssh-keygen -q -t ed25519 -N '' -C vmop-dev -f "$key"
node --input-type=module -e '
  import { readFileSync } from "node:fs";
  import { parse, stringify } from "yaml";
  const [example, publicKey] = process.argv.slice(1).map((file) => readFileSync(file, "utf8"));
  const vm = parse(example);
  vm.spec.cloudInit = { userData: { ssh_authorized_keys: [publicKey.trim()] } };
  process.stdout.write(stringify(vm));
' examples/test-guest.yaml "$key.pub" | kubectl --kubeconfig "$kubeconfig" apply -f -
echo "Waiting for the example VM to run (kubectl --kubeconfig $kubeconfig get vm -A -w to watch it yourself)..."
for _ in $(seq 1 120); do
  phase="$(kubectl --kubeconfig "$kubeconfig" get vm test-guest -o jsonpath='{.status.phase}' 2>/dev/null || true)"
  [[ "$phase" == "Running" ]] && break
  sleep 1
done
kubectl --kubeconfig "$kubeconfig" get vm -A
echo "A shell in the guest: bin/vmop vm ssh test-guest -i $key --kubeconfig $kubeconfig"
