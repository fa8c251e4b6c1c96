import { describe, expect, it } from "vitest";
import { classifyAddress, isAddressAllowed } from "./address-policy";

describe("address policy", () => {
  it.each([
    ["8.8.8.8", "public"],
    ["1.1.1.1", "public"],
    ["2606:4700:4700::1111", "public"],
    ["127.0.0.1", "private"],
    ["127.9.9.9", "private"],
    ["10.1.2.3", "private"],
    ["172.16.0.1", "private"],
    ["172.31.255.255", "private"],
    ["172.32.0.1", "public"],
    ["192.168.1.1", "private"],
    ["100.64.0.1", "private"],
    ["::1", "private"],
    ["fd12:3456::1", "private"],
    ["::ffff:127.0.0.1", "private"],
    ["0:0:0:0:0:ffff:7f00:1", "private"],
    ["::ffff:10.0.0.1", "private"],
    ["169.254.169.254", "blocked"],
    ["169.254.1.1", "blocked"],
    ["::ffff:169.254.169.254", "blocked"],
    ["64:ff9b::a9fe:a9fe", "blocked"],
    ["64:ff9b::808:808", "public"],
    ["fd00:ec2::254", "blocked"],
    ["fe80::1", "blocked"],
    ["fe80::1%eth0", "blocked"],
    ["0.0.0.0", "blocked"],
    ["::", "blocked"],
    ["224.0.0.1", "blocked"],
    ["255.255.255.255", "blocked"],
    ["ff02::1", "blocked"],
    ["not-an-ip", "blocked"],
    // IANA IPv4 special-purpose registry
    ["0.1.2.3", "blocked"],
    ["100.127.255.254", "private"],
    ["100.128.0.1", "public"],
    ["192.0.0.9", "private"],
    ["192.0.2.10", "private"],
    ["192.88.99.1", "blocked"],
    ["198.18.0.1", "private"],
    ["198.19.255.255", "private"],
    ["198.51.100.7", "private"],
    ["203.0.113.7", "private"],
    ["239.255.255.250", "blocked"],
    ["240.0.0.1", "blocked"],
    ["255.255.255.254", "blocked"],
    // IPv4-mapped and IPv4-translated (SIIT) forms are judged by the IPv4 address
    ["::ffff:8.8.8.8", "public"],
    ["::ffff:0:0", "blocked"],
    ["::ffff:0:127.0.0.1", "private"],
    ["0:0:0:0:ffff:0:a9fe:a9fe", "blocked"],
    ["::ffff:0:808:808", "public"],
    ["::ffff:0:0:0", "blocked"],
    // IPv4-compatible (deprecated)
    ["::127.0.0.1", "private"],
    ["::a9fe:a9fe", "blocked"],
    // NAT64: the well-known prefix embeds IPv4; the local-use one is refused
    ["64:ff9b::127.0.0.1", "private"],
    ["64:ff9b::c0a8:101", "private"],
    ["64:ff9b:1::a9fe:a9fe", "blocked"],
    ["64:ff9b:1::808:808", "blocked"],
    // 6to4 embeds an IPv4 address in bits 16-47
    ["2002:a9fe:a9fe::1", "blocked"],
    ["2002:7f00:1::1", "private"],
    ["2002:c0a8:101::", "private"],
    ["2002:a00:1:1::1", "private"],
    ["2002:808:808::1", "public"],
    ["2002::1", "blocked"],
    // Teredo and the rest of the IETF protocol block
    ["2001::1", "blocked"],
    ["2001:0:4136:e378:8000:63bf:3fff:fdd2", "blocked"],
    ["2001:2::1", "blocked"],
    ["2001:1ff:ffff::1", "blocked"],
    ["2001:200::1", "public"],
    ["2001:4860:4860::8888", "public"],
    // site-local (deprecated), unique-local, documentation
    ["fec0::1", "private"],
    ["feff::1", "private"],
    ["fc00::1", "private"],
    ["2001:db8::1", "private"],
    ["3fff::1", "private"],
    // other IANA IPv6 special-purpose and unassigned space
    ["100::1", "blocked"],
    ["5f00::1", "blocked"],
    ["::2", "blocked"],
    ["1::1", "blocked"],
    ["4000::1", "blocked"],
    ["e000::1", "blocked"],
    ["ff05::1:3", "blocked"],
    ["::ffff:255.255.255.255", "blocked"],
  ])("%s is %s", (address, verdict) => {
    expect(classifyAddress(address)).toBe(verdict);
  });

  it("lets private targets through only with the opt-in, and metadata never", () => {
    expect(isAddressAllowed("127.0.0.1", false)).toBe(false);
    expect(isAddressAllowed("127.0.0.1", true)).toBe(true);
    expect(isAddressAllowed("169.254.169.254", true)).toBe(false);
    expect(isAddressAllowed("93.184.216.34", false)).toBe(true);
    // Embedded IPv4 forms get exactly the IPv4 verdict, opt-in or not.
    for (const allow of [false, true]) {
      expect(isAddressAllowed("::ffff:0:169.254.169.254", allow)).toBe(false);
      expect(isAddressAllowed("2002:a9fe:a9fe::", allow)).toBe(false);
      expect(isAddressAllowed("2002:7f00:1::", allow)).toBe(allow);
      expect(isAddressAllowed("fec0::1", allow)).toBe(allow);
      expect(isAddressAllowed("2001::1", allow)).toBe(false);
    }
  });
});
