// The test bed's OpenID Connect provider: Dex (built by scripts/build-kubernetes.sh), in memory,
// with a login form for a few people and their groups, and vmop's web GUI as its one client.
import { randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { stringify } from 'yaml';
import { freePort, waitForPort } from '../util/free-port.js';
import { locateNodeBinaries } from './kube-binaries.js';
import { spawnLogged, type LoggedProcess } from './logged-process.js';
import type { ProcessGroup } from './process-group.js';

/** Everyone's password on the test bed (Dex's own example hash of it). */
export const DEV_PASSWORD = 'password';
const DEV_PASSWORD_HASH = '$2a$10$2b2cU8CPhOTaGrs1HRQuAueS7JTT5ZHsHSzYiFPm1leZck7Mc8T4W';

/** Someone with an account at the test bed's Dex (user: the login name and `preferred_username`). */
export interface DexPerson {
  user: string;
  name: string;
  groups: readonly string[];
  /** Default `<user>@example.com`. */
  email?: string;
  /** Default true; false makes a person whose address nobody checked, as many providers have. */
  emailVerified?: boolean;
  /** Default `user`; another is a name the person picked (where a provider lets them). */
  preferredUsername?: string;
}

/** The people of the test bed: an administrator (RBAC, see dev-environment.ts) and users. */
export const DEV_PEOPLE: readonly DexPerson[] = [
  { user: 'admin', name: 'Ada Admin', groups: ['vmop-admins'] },
  { user: 'alice', name: 'Alice', groups: ['users'] },
  { user: 'bob', name: 'Bob', groups: ['users'] },
  { user: 'carol', name: 'Carol', groups: [] },
];

export const DEV_CLIENT_ID = 'vmop';

export interface OidcProvider {
  issuer: string;
  clientId: string;
  clientSecret: string;
  process: LoggedProcess;
  stop(): Promise<void>;
}

/** Starts Dex on loopback; `redirectUris` are the GUI's callbacks (one per manager replica). */
export async function startOidcProvider(input: {
  dir: string;
  redirectUris: string[];
  port?: number;
  clientSecret?: string;
  /** Default DEV_PEOPLE; each person's `sub` is made from their place in the list. */
  people?: readonly DexPerson[];
  /** The process group Dex runs in. */
  group?: ProcessGroup;
}): Promise<OidcProvider> {
  const binaries = await locateNodeBinaries();
  const port = input.port ?? (await freePort());
  const issuer = `http://127.0.0.1:${port}/dex`;
  const clientSecret = input.clientSecret ?? randomBytes(24).toString('base64url');
  const config = {
    issuer,
    storage: { type: 'memory' },
    web: { http: `127.0.0.1:${port}` },
    logger: { level: 'info' },
    oauth2: { skipApprovalScreen: true },
    enablePasswordDB: true,
    staticClients: [
      { id: DEV_CLIENT_ID, name: 'vmop', secret: clientSecret, redirectURIs: input.redirectUris },
    ],
    staticPasswords: (input.people ?? DEV_PEOPLE).map((person, i) => ({
      email: person.email ?? `${person.user}@example.com`,
      hash: DEV_PASSWORD_HASH,
      username: person.user,
      preferredUsername: person.preferredUsername ?? person.user,
      name: person.name,
      emailVerified: person.emailVerified ?? true,
      groups: [...person.groups],
      userID: `0000000${i}-0000-4000-8000-000000000000`,
    })),
  };
  const configPath = path.join(input.dir, 'dex.yaml');
  await writeFile(configPath, stringify(config), { mode: 0o600 });
  const dex = await spawnLogged('dex', binaries.dex, ['serve', configPath], path.join(input.dir, 'dex.log'), {
    group: input.group,
  });
  try {
    await waitForPort(port);
  } catch (err) {
    await dex.stop(1_000);
    throw new Error(`Dex did not start: ${String(err)}\n${await dex.logTail()}`);
  }
  return { issuer, clientId: DEV_CLIENT_ID, clientSecret, process: dex, stop: () => dex.stop(5_000) };
}
