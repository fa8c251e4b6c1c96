import { createServer } from "node:net";
import { describe, expect, it } from "vitest";
import { bindWithin, listenErrorCode, PortInUseError } from "./listen";

describe("bindWithin", () => {
  it("retries a taken port until it is freed", async () => {
    const answers = [false, false, "listener"] as const;
    let calls = 0;
    const listener = await bindWithin(async () => answers[calls++]!, { host: "127.0.0.1", port: 8080, waitMs: 10_000, everyMs: 1 });
    expect(listener).toBe("listener");
    expect(calls).toBe(3);
  });

  it("gives up after waitMs with PortInUseError naming the address", async () => {
    let calls = 0;
    const attempt = bindWithin(async () => (calls++, false), { host: "127.0.0.1", port: 8080, waitMs: 30, everyMs: 5 });
    await expect(attempt).rejects.toBeInstanceOf(PortInUseError);
    await expect(attempt).rejects.toThrow(/^cannot listen on 127\.0\.0\.1:8080: the port is in use by another process \(waited \d+ ms/);
    expect(calls).toBeGreaterThan(1);
  });

  it("a failure other than a taken port ends the wait at once", async () => {
    await expect(bindWithin(async () => Promise.reject(new Error("EADDRNOTAVAIL")), { host: "10.255.255.1", port: 8080, waitMs: 60_000 })).rejects.toThrow("EADDRNOTAVAIL");
  });
});

describe("listenErrorCode", () => {
  it("EADDRINUSE for a held port, undefined for a free one", async () => {
    const held = createServer();
    await new Promise<void>((r) => held.listen(0, "127.0.0.1", () => r()));
    const { port } = held.address() as { port: number };
    expect(await listenErrorCode("127.0.0.1", port)).toBe("EADDRINUSE");
    await new Promise<void>((r) => held.close(() => r()));
    expect(await listenErrorCode("127.0.0.1", port)).toBeUndefined();
  });
});
