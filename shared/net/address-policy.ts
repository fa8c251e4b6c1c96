import { BlockList, isIP } from "node:net";

/**
 * Which network addresses an outbound request to a user-supplied URL may reach.
 *
 * Always refused: unspecified, link-local (169.254.0.0/16 and fe80::/10, where cloud
 * metadata services live: 169.254.169.254, fd00:ec2::254), multicast, broadcast and
 * reserved ranges. Refused unless `allowPrivate` is set: loopback, RFC 1918 private,
 * carrier-grade NAT, unique-local IPv6 and the documentation/benchmark ranges. The
 * opt-in exists for the embedded default and for tests that serve audio from
 * 127.0.0.1; it never opens the metadata addresses.
 *
 * IPv4-mapped (::ffff:a.b.c.d), IPv4-compatible and NAT64 (64:ff9b::/96) IPv6 forms are
 * judged by the IPv4 address they embed.
 */
const alwaysBlocked = new BlockList();
alwaysBlocked.addSubnet("0.0.0.0", 8, "ipv4");
alwaysBlocked.addSubnet("169.254.0.0", 16, "ipv4");
alwaysBlocked.addSubnet("224.0.0.0", 4, "ipv4");
alwaysBlocked.addSubnet("240.0.0.0", 4, "ipv4");
alwaysBlocked.addAddress("::", "ipv6");
alwaysBlocked.addSubnet("fe80::", 10, "ipv6");
alwaysBlocked.addSubnet("ff00::", 8, "ipv6");
alwaysBlocked.addAddress("fd00:ec2::254", "ipv6");

const privateRanges = new BlockList();
privateRanges.addSubnet("127.0.0.0", 8, "ipv4");
privateRanges.addSubnet("10.0.0.0", 8, "ipv4");
privateRanges.addSubnet("172.16.0.0", 12, "ipv4");
privateRanges.addSubnet("192.168.0.0", 16, "ipv4");
privateRanges.addSubnet("100.64.0.0", 10, "ipv4");
privateRanges.addSubnet("192.0.0.0", 24, "ipv4");
privateRanges.addSubnet("192.0.2.0", 24, "ipv4");
privateRanges.addSubnet("198.18.0.0", 15, "ipv4");
privateRanges.addSubnet("198.51.100.0", 24, "ipv4");
privateRanges.addSubnet("203.0.113.0", 24, "ipv4");
privateRanges.addAddress("::1", "ipv6");
privateRanges.addSubnet("fc00::", 7, "ipv6");
privateRanges.addSubnet("2001:db8::", 32, "ipv6");
privateRanges.addSubnet("100::", 64, "ipv6");

export type AddressVerdict = "public" | "private" | "blocked";

/** Expands an IPv6 literal to its 8 groups (numbers), or undefined when malformed. */
function ipv6Groups(address: string): number[] | undefined {
  let addr = address.toLowerCase();
  const zone = addr.indexOf("%");
  if (zone >= 0) addr = addr.slice(0, zone);
  // A trailing dotted IPv4 becomes two groups.
  const v4 = /(\d+\.\d+\.\d+\.\d+)$/.exec(addr);
  if (v4) {
    const parts = v4[1]!.split(".").map(Number);
    addr = addr.slice(0, -v4[1]!.length) + `${((parts[0]! << 8) | parts[1]!).toString(16)}:${((parts[2]! << 8) | parts[3]!).toString(16)}`;
  }
  const [head, tail] = addr.split("::");
  const h = head ? head.split(":") : [];
  const t = tail !== undefined ? (tail ? tail.split(":") : []) : undefined;
  const groups = t === undefined ? h : [...h, ...Array(8 - h.length - t.length).fill("0"), ...t];
  if (groups.length !== 8) return undefined;
  return groups.map((g) => parseInt(g, 16));
}

/** The IPv4 address embedded in a mapped / compatible / NAT64 IPv6 address, if any. */
function embeddedIpv4(address: string): string | undefined {
  const g = ipv6Groups(address);
  if (!g) return undefined;
  const v4 = () => `${g[6]! >> 8}.${g[6]! & 255}.${g[7]! >> 8}.${g[7]! & 255}`;
  const zeros = (from: number, to: number) => g.slice(from, to).every((x) => x === 0);
  if (zeros(0, 5) && g[5] === 0xffff) return v4(); // ::ffff:a.b.c.d
  if (zeros(0, 6) && (g[6]! !== 0 || g[7]! > 1)) return v4(); // ::a.b.c.d (deprecated)
  if (g[0] === 0x64 && g[1] === 0xff9b && zeros(2, 6)) return v4(); // 64:ff9b::/96
  return undefined;
}

/** Classifies one IP address (v4 or v6 literal). Anything unparsable is blocked. */
export function classifyAddress(address: string): AddressVerdict {
  const family = isIP(address);
  if (family === 0) return "blocked";
  if (family === 6) {
    const v4 = embeddedIpv4(address);
    if (v4) return classifyAddress(v4);
    const bare = address.split("%")[0]!;
    if (alwaysBlocked.check(bare, "ipv6")) return "blocked";
    return privateRanges.check(bare, "ipv6") ? "private" : "public";
  }
  if (address === "255.255.255.255" || alwaysBlocked.check(address, "ipv4")) return "blocked";
  return privateRanges.check(address, "ipv4") ? "private" : "public";
}

/** True when a request may connect to `address` under the policy. */
export function isAddressAllowed(address: string, allowPrivate: boolean): boolean {
  const verdict = classifyAddress(address);
  return verdict === "public" || (verdict === "private" && allowPrivate);
}
