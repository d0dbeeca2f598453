// Where an import may connect. The importer fetches what a VM's author names, from inside the
// cluster: without a guard, a URL could read the cluster's own endpoints (the apiserver, kubelets,
// cloud metadata at 169.254.169.254) and store the answer on the author's disk. Each hop of a
// download (redirects included) is checked by the addresses its host resolves to, and the
// connection goes to exactly those checked addresses (no second DNS answer in between).
import { lookup as dnsLookup } from 'node:dns/promises';
import { BlockList, isIP, type LookupFunction } from 'node:net';
import { ImportFailure } from './failure.js';

/** Never fetched from unless allowed: this host, link-local (cloud metadata), "this network". */
export const ALWAYS_DENIED = ['127.0.0.0/8', '::1/128', '169.254.0.0/16', 'fe80::/10', '0.0.0.0/8'];

/**
 * A rule: a network (`10.0.0.0/8`, `fd00::/8`), an address (all its ports), or an address with a
 * port (`10.250.2.1:6443`, `[fd00::1]:6443`).
 */
interface Rule {
  rule: string;
  matches: (address: string, port: number) => boolean;
}

function parseRules(rules: readonly string[]): Rule[] {
  const named: Rule[] = [];
  for (const rule of rules) {
    // An IPv6 address with a port only in brackets: 2001:db8::1:80 is an address.
    const endpoint = /^(?:\[([^\]]+)\]|([^:[\]]+)):(\d+)$/.exec(rule);
    const host = endpoint?.[1] ?? endpoint?.[2];
    if (host && isIP(host)) {
      named.push({ rule, matches: (a, p) => a === host && p === Number(endpoint![3]) });
      continue;
    }
    const [address, bits] = rule.split('/');
    const family = isIP(address ?? '');
    if (!family) throw new Error(`not a network, address or address:port: ${rule}`);
    const type = family === 6 ? 'ipv6' : 'ipv4';
    const prefix = bits === undefined ? (family === 6 ? 128 : 32) : Number(bits);
    const one = new BlockList();
    one.addSubnet(address!, prefix, type);
    named.push({ rule, matches: (a) => one.check(a, isIP(a) === 6 ? 'ipv6' : 'ipv4') });
  }
  return named;
}

/** The address or name a URL connects to (without IPv6 brackets), and its port. */
export function hostAndPort(url: URL): { host: string; port: number } {
  const host = url.hostname.replace(/^\[|\]$/g, '');
  return { host, port: Number(url.port || (url.protocol === 'https:' ? 443 : 80)) };
}

export interface DestinationGuard {
  /**
   * The addresses `url`'s host resolves to, all of them allowed; else an ImportFailure naming the
   * address and the rule it falls under.
   */
  check(url: URL): Promise<Array<{ address: string; family: number }>>;
}

export function destinationGuard(
  denied: readonly string[],
  allowed: readonly string[] = [],
): DestinationGuard {
  const deny = parseRules([...ALWAYS_DENIED, ...denied]);
  const allow = parseRules(allowed);
  const ruleOf = (rules: Rule[], address: string, port: number) =>
    rules.find((r) => r.matches(address, port))?.rule;
  return {
    async check(url) {
      const { host, port } = hostAndPort(url);
      const family = isIP(host);
      const addresses = family
        ? [{ address: host, family }]
        : await dnsLookup(host, { all: true }).catch(() => []);
      for (const { address } of addresses) {
        const deniedBy = ruleOf(deny, address, port);
        if (deniedBy && !ruleOf(allow, address, port))
          throw new ImportFailure(
            'Forbidden',
            `imports may not fetch from ${url.host} (${address} is in ${deniedBy}, which the cluster's admin has not allowed)`,
          );
      }
      return addresses;
    },
  };
}

/** A lookup that answers with the addresses checked for `host`, not a new DNS answer. */
export function pinnedLookup(addresses: Array<{ address: string; family: number }>): LookupFunction {
  return ((_hostname: string, options: { all?: boolean }, callback: (...args: unknown[]) => void) => {
    if (addresses.length === 0)
      return callback(Object.assign(new Error('no address'), { code: 'ENOTFOUND' }));
    if (options?.all) return callback(null, addresses);
    callback(null, addresses[0]!.address, addresses[0]!.family);
  }) as LookupFunction;
}
