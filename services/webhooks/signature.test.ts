import { describe, expect, it } from "vitest";
import { createHmac } from "node:crypto";
import { signPayload, verifySignature } from "./signature";

describe("webhook signatures", () => {
  const body = JSON.stringify({ workflow_id: "w", output: { result: { text: "héllo" } } });

  it("is HMAC-SHA256 over '<t>.<body>' in the documented header format", () => {
    const header = signPayload("secret", body, 1_700_000_000);
    const mac = createHmac("sha256", "secret").update(`1700000000.${body}`).digest("hex");
    expect(header).toBe(`t=1700000000,v1=${mac}`);
  });

  it("verifies good signatures and refuses tampered bodies, wrong secrets and stale timestamps", () => {
    const t = 1_700_000_000;
    const header = signPayload("secret", body, t);
    expect(verifySignature("secret", header, body, t + 10)).toBe(true);
    expect(verifySignature("secret", header, body + " ", t)).toBe(false);
    expect(verifySignature("other", header, body, t)).toBe(false);
    expect(verifySignature("secret", header, body, t + 301)).toBe(false);
    expect(verifySignature("secret", undefined, body, t)).toBe(false);
    expect(verifySignature("secret", "t=abc,v1=00", body, t)).toBe(false);
  });
});
