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
  ])("%s is %s", (address, verdict) => {
    expect(classifyAddress(address)).toBe(verdict);
  });

  it("lets private targets through only with the opt-in, and metadata never", () => {
    expect(isAddressAllowed("127.0.0.1", false)).toBe(false);
    expect(isAddressAllowed("127.0.0.1", true)).toBe(true);
    expect(isAddressAllowed("169.254.169.254", true)).toBe(false);
    expect(isAddressAllowed("93.184.216.34", false)).toBe(true);
  });
});
