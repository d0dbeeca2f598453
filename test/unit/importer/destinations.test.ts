// Where an import may connect: the checks by address, port and rule, before any connection.
import { describe, expect, it } from 'vitest';
import { destinationGuard, pinnedLookup } from '../../../src/importer/destinations.js';
import { apiserverEndpoint } from '../../../src/operator/import-destinations.js';

describe('the importer’s destinations', () => {
  const guard = destinationGuard(
    ['10.96.0.0/12', '10.250.2.1:6443', '10.250.2.5', 'fd00::/8'],
    ['10.96.0.10:80'],
  );
  const refused = (url: string) =>
    guard.check(new URL(url)).then(
      () => 'allowed',
      (err: Error) => err.message,
    );

  it('refuses loopback, link-local (cloud metadata) and the denied rules, naming the rule', async () => {
    expect(await refused('http://169.254.169.254/latest/meta-data/')).toBe(
      "imports may not fetch from 169.254.169.254 (169.254.169.254 is in 169.254.0.0/16, which the cluster's admin has not allowed)",
    );
    expect(await refused('http://127.0.0.1:8080/')).toMatch(/127\.0\.0\.0\/8/);
    expect(await refused('http://localhost/')).toMatch(/is in (127\.0\.0\.0\/8|::1\/128)/); // by its resolved address
    expect(await refused('http://[::1]/')).toMatch(/::1\/128/);
    expect(await refused('http://10.100.0.1/')).toMatch(/10\.96\.0\.0\/12/);
    expect(await refused('https://10.250.2.1:6443/api')).toMatch(/10\.250\.2\.1:6443/);
    expect(await refused('http://10.250.2.5:10250/pods')).toMatch(/in 10\.250\.2\.5,/);
    expect(await refused('http://[fd00::1]/')).toMatch(/fd00::\/8/);
  });

  it('lets through other addresses, other ports of a denied endpoint, and what is allowed', async () => {
    expect(await refused('http://10.250.2.1:8080/disk.qcow2')).toBe('allowed');
    expect(await refused('http://192.0.2.7/disk.qcow2')).toBe('allowed');
    expect(await refused('http://10.96.0.10/disk.qcow2')).toBe('allowed');
    expect(await refused('http://10.96.0.10:81/disk.qcow2')).toMatch(/10\.96\.0\.0\/12/);
  });

  it('connects to the addresses it checked, not to a second DNS answer', async () => {
    const checked = await guard.check(new URL('http://192.0.2.7/'));
    const lookup = pinnedLookup(checked);
    const answer = await new Promise((resolve) =>
      lookup('elsewhere.example', { all: true }, (err, addresses) => resolve(err ?? addresses)),
    );
    expect(answer).toEqual([{ address: '192.0.2.7', family: 4 }]);
  });

  it('names the apiserver as an address and port when its URL has an address', () => {
    expect(apiserverEndpoint('https://10.250.2.1:36251')).toBe('10.250.2.1:36251');
    expect(apiserverEndpoint('https://10.96.0.1')).toBe('10.96.0.1:443');
    expect(apiserverEndpoint('https://[fd00::1]:6443')).toBe('[fd00::1]:6443');
    expect(apiserverEndpoint('https://kubernetes.default.svc')).toBeUndefined();
  });
});
