// The VM reconcile's steps, in the order they run (pipeline.ts runs them on one state). What the
// order guards:
// - the display Secret is made before anything names it (the runner config, the pod);
// - a VM's IP address is asked for (its VirtualMachineIPAddress) before its pod waits for it;
// - the objects the VM owns are written only while its spec is valid and nothing was refused
//   (steps marked `owned`), the ConfigMap not while a migration runs (both runners read it);
// - a runner pod waits for its claims and imports (plan.ts), and the claims are made first;
// - the status is written, guarded by the VM's resourceVersion, before a pod or a migration's
//   target is made, so two replicas never make two;
// - the run policy acts last, on the status just written.
import type { Step } from './pipeline.js';
import type { VmState } from './vm-state.js';
import { assignmentStep } from './status/assignment-step.js';
import { displaySecretStep } from './runner-config/display-secret-step.js';
import { diskAttachmentsStep, diskExpansionStep, diskImportsStep, runnerClaimsStep } from './disks/steps.js';
import { evictionStep } from './migration/eviction-step.js';
import { ipAddressStep } from './address/ip-address-step.js';
import { legacyStatefulSetStep } from './runner-pod/legacy-statefulset-step.js';
import { loadBalancerStep } from './load-balancer/step.js';
import { migrationStep } from './migration/step.js';
import { networkPolicyStep } from './network-policy/step.js';
import { provisioningSecretsStep } from './runner-config/provisioning-secrets-step.js';
import { runPolicyStep } from './lifecycle/run-policy-step.js';
import { runnerConfigStep } from './runner-config/step.js';
import { runnerIdentityStep } from './runner-config/identity-step.js';
import { runnerPodCreationStep } from './runner-pod/creation-step.js';
import { runnerPodsStep } from './runner-pod/step.js';
import { runnerUpdateStep } from './runner-pod/update-step.js';
import { stuckRunnerPodStep } from './runner-pod/stuck-step.js';
import { startRetryStep } from './lifecycle/start-retry-step.js';
import { statusStep } from './status/step.js';

export const VM_STEPS: ReadonlyArray<Step<VmState>> = [
  displaySecretStep,
  provisioningSecretsStep,
  ipAddressStep,
  runnerConfigStep,
  runnerIdentityStep,
  legacyStatefulSetStep,
  runnerPodsStep,
  stuckRunnerPodStep,
  diskImportsStep,
  runnerClaimsStep,
  diskAttachmentsStep,
  diskExpansionStep,
  loadBalancerStep,
  networkPolicyStep,
  evictionStep,
  runnerUpdateStep,
  statusStep,
  assignmentStep,
  migrationStep,
  runnerPodCreationStep,
  startRetryStep,
  runPolicyStep,
];
