import { BlockList, isIP } from "node:net";

/**
 * Which network addresses an outbound request to a user-supplied URL may reach,
 * following IANA's IPv4 and IPv6 special-purpose address registries.
 *
 * Always refused: unspecified, link-local (169.254.0.0/16 and fe80::/10, where cloud
 * metadata services live: 169.254.169.254, fd00:ec2::254), multicast, broadcast,
 * reserved and protocol-only ranges (240.0.0.0/4, 192.88.99.0/24, the IETF protocol
 * block 2001::/23 with Teredo 2001::/32, discard-only 100::/64, local-use NAT64
 * 64:ff9b:1::/48, SRv6 5f00::/16), and every IPv6 address outside global unicast
 * 2000::/3 that no rule below names. Refused unless `allowPrivate` is set: loopback,
 * RFC 1918 private, carrier-grade NAT, 192.0.0.0/24, benchmarking, unique-local and
 * deprecated site-local IPv6 (fc00::/7, fec0::/10) and the documentation ranges. The
 * opt-in exists for the embedded default and for tests that serve audio from
 * 127.0.0.1; it never opens the metadata addresses.
 *
 * IPv6 forms that embed an IPv4 address are judged by that address, under the IPv4
 * rules: IPv4-mapped (::ffff:a.b.c.d), IPv4-translated (::ffff:0:a.b.c.d),
 * IPv4-compatible (::a.b.c.d), NAT64 (64:ff9b::/96) and 6to4 (2002:AABB:CCDD::/48),
 * since a relay or translator on the path delivers to the IPv4 host. Teredo's client
 * address is obfuscated and its path goes through a relay, so it is refused outright.
 */
const blockedV4 = new BlockList();
blockedV4.addSubnet("0.0.0.0", 8, "ipv4");
blockedV4.addSubnet("169.254.0.0", 16, "ipv4");
blockedV4.addSubnet("192.88.99.0", 24, "ipv4"); // deprecated 6to4 relay anycast
blockedV4.addSubnet("224.0.0.0", 4, "ipv4");
blockedV4.addSubnet("240.0.0.0", 4, "ipv4"); // reserved, includes 255.255.255.255

const privateV4 = new BlockList();
privateV4.addSubnet("127.0.0.0", 8, "ipv4");
privateV4.addSubnet("10.0.0.0", 8, "ipv4");
privateV4.addSubnet("172.16.0.0", 12, "ipv4");
privateV4.addSubnet("192.168.0.0", 16, "ipv4");
privateV4.addSubnet("100.64.0.0", 10, "ipv4");
privateV4.addSubnet("192.0.0.0", 24, "ipv4");
privateV4.addSubnet("192.0.2.0", 24, "ipv4");
privateV4.addSubnet("198.18.0.0", 15, "ipv4");
privateV4.addSubnet("198.51.100.0", 24, "ipv4");
privateV4.addSubnet("203.0.113.0", 24, "ipv4");

const blockedV6 = new BlockList();
blockedV6.addAddress("::", "ipv6");
blockedV6.addSubnet("fe80::", 10, "ipv6");
blockedV6.addSubnet("ff00::", 8, "ipv6");
blockedV6.addAddress("fd00:ec2::254", "ipv6");
blockedV6.addSubnet("2001::", 23, "ipv6"); // IETF protocol assignments, Teredo 2001::/32 among them

const privateV6 = new BlockList();
privateV6.addAddress("::1", "ipv6");
privateV6.addSubnet("fc00::", 7, "ipv6");
privateV6.addSubnet("fec0::", 10, "ipv6");
privateV6.addSubnet("2001:db8::", 32, "ipv6");
privateV6.addSubnet("3fff::", 20, "ipv6");

const globalUnicastV6 = new BlockList();
globalUnicastV6.addSubnet("2000::", 3, "ipv6");

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
  const numbers = groups.map((g) => parseInt(g, 16));
  return numbers.every((n) => Number.isInteger(n) && n >= 0 && n <= 0xffff) ? numbers : undefined;
}

const dotted = (hi: number, lo: number) => `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;

/** The IPv4 address an IPv6 address embeds and is delivered to, if any. */
function embeddedIpv4(g: number[]): string | undefined {
  const zeros = (from: number, to: number) => g.slice(from, to).every((x) => x === 0);
  if (zeros(0, 5) && g[5] === 0xffff) return dotted(g[6]!, g[7]!); // ::ffff:a.b.c.d, mapped
  if (zeros(0, 4) && g[4] === 0xffff && g[5] === 0) return dotted(g[6]!, g[7]!); // ::ffff:0:a.b.c.d, translated
  if (zeros(0, 6) && (g[6]! !== 0 || g[7]! > 1)) return dotted(g[6]!, g[7]!); // ::a.b.c.d, compatible (deprecated)
  if (g[0] === 0x64 && g[1] === 0xff9b && zeros(2, 6)) return dotted(g[6]!, g[7]!); // 64:ff9b::/96, NAT64
  if (g[0] === 0x2002) return dotted(g[1]!, g[2]!); // 2002:AABB:CCDD::/48, 6to4
  return undefined;
}

function classifyIpv4(address: string): AddressVerdict {
  if (blockedV4.check(address, "ipv4")) return "blocked";
  return privateV4.check(address, "ipv4") ? "private" : "public";
}

function classifyIpv6(address: string): AddressVerdict {
  const g = ipv6Groups(address);
  if (!g) return "blocked";
  const v4 = embeddedIpv4(g);
  if (v4) return classifyIpv4(v4);
  // Checked in canonical form: no zone id, no dotted tail.
  const canonical = g.map((x) => x.toString(16)).join(":");
  if (blockedV6.check(canonical, "ipv6")) return "blocked";
  if (privateV6.check(canonical, "ipv6")) return "private";
  return globalUnicastV6.check(canonical, "ipv6") ? "public" : "blocked";
}

/** Classifies one IP address (v4 or v6 literal). Anything unparsable is blocked. */
export function classifyAddress(address: string): AddressVerdict {
  switch (isIP(address)) {
    case 4:
      return classifyIpv4(address);
    case 6:
      return classifyIpv6(address);
    default:
      return "blocked";
  }
}

/** True when a request may connect to `address` under the policy. */
export function isAddressAllowed(address: string, allowPrivate: boolean): boolean {
  const verdict = classifyAddress(address);
  return verdict === "public" || (verdict === "private" && allowPrivate);
}
