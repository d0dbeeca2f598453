// Provisioning data from Secrets (cloud-init and Windows sysprep): which Secret keys vmop reads.
// Shared by the operator (it checks the keys exist, never reads values into anything) and the
// runner (it reads the mounted files when it builds the media).

/** The keys of a cloud-init Secret, each with the names KubeVirt and Deckhouse users write. */
export const CLOUD_INIT_SECRET_KEYS = {
  userData: ['userData', 'userdata'],
  metaData: ['metaData', 'metadata'],
  networkConfig: ['networkConfig', 'networkData', 'networkdata'],
} as const;

/** Deckhouse's Secret type for cloud-init data (any type is accepted; this one is documented). */
export const DECKHOUSE_CLOUD_INIT_SECRET_TYPE = 'provisioning.virtualization.deckhouse.io/cloud-init';

/** The answer files Windows Setup looks for in the root of removable media. */
export const SYSPREP_FILES = ['autounattend.xml', 'unattend.xml'] as const;
