// The VM reconcile's steps, in the order they run (pipeline.ts runs them on one state). What the
// order guards:
// - the display Secret is made before anything names it (the runner config, the pod);
// - the objects the VM owns are written only while its spec is valid and nothing was refused
//   (steps marked `owned`), the ConfigMap not while a migration runs (both runners read it);
// - a runner pod waits for its claims and imports (plan.ts), and the claims are made first;
// - the status is written, guarded by the VM's resourceVersion, before a pod or a migration's
//   target is made, so two replicas never make two;
// - the run policy acts last, on the status just written.
import type { Step } from '../pipeline.js';
import type { VmState } from '../vm-state.js';
import { assignmentStep } from './assignment.js';
import { displaySecretStep } from './display-secret.js';
import { diskAttachmentsStep, diskExpansionStep, diskImportsStep, runnerClaimsStep } from './disks.js';
import { evictionStep } from './eviction.js';
import { legacyStatefulSetStep } from './legacy-statefulset.js';
import { loadBalancerStep } from './load-balancer.js';
import { migrationStep } from './migration.js';
import { provisioningSecretsStep } from './provisioning-secrets.js';
import { runPolicyStep } from './run-policy.js';
import { runnerConfigStep } from './runner-config.js';
import { runnerIdentityStep } from './runner-identity.js';
import { runnerPodCreationStep } from './runner-pod-creation.js';
import { runnerPodsStep } from './runner-pods.js';
import { startRetryStep } from './start-retry.js';
import { statusStep } from './status.js';

export const VM_STEPS: ReadonlyArray<Step<VmState>> = [
  displaySecretStep,
  provisioningSecretsStep,
  runnerConfigStep,
  runnerIdentityStep,
  legacyStatefulSetStep,
  runnerPodsStep,
  diskImportsStep,
  runnerClaimsStep,
  diskAttachmentsStep,
  diskExpansionStep,
  loadBalancerStep,
  evictionStep,
  statusStep,
  assignmentStep,
  migrationStep,
  runnerPodCreationStep,
  startRetryStep,
  runPolicyStep,
];
