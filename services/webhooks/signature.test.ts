import { describe, expect, it } from "vitest";
import { createHmac } from "node:crypto";
import { SIGNATURE_HEADER, signPayload, verifySignature } from "./signature";

describe("webhook signatures", () => {
  const body = JSON.stringify({ workflow_id: "w", output: { result: { text: "héllo" } } });

  it("is HMAC-SHA256 over '<t>.<body>' in the documented header format", () => {
    const header = signPayload("secret", body, 1_700_000_000);
    const mac = createHmac("sha256", "secret").update(`1700000000.${body}`).digest("hex");
    expect(header).toBe(`t=1700000000,v1=${mac}`);
    // the documented header name (lower case: how node's HTTP headers are read)
    expect(SIGNATURE_HEADER).toBe("x-stt-signature");
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

  it("refuses a timestamp from the future beyond the tolerance as it refuses a stale one (a captured signature cannot be pre-dated for later replay)", () => {
    const t = 1_700_000_000;
    const header = signPayload("secret", body, t);
    // the receiver's clock behind the sender's: exactly the tolerance still passes, a second more does not
    expect(verifySignature("secret", header, body, t - 300)).toBe(true);
    expect(verifySignature("secret", header, body, t - 301)).toBe(false);
    expect(verifySignature("secret", header, body, t - 86_400)).toBe(false);
    // and behind it: the same bound both ways
    expect(verifySignature("secret", header, body, t + 300)).toBe(true);
    // a tolerance given by the receiver is the one used
    expect(verifySignature("secret", header, body, t - 31, 30)).toBe(false);
    expect(verifySignature("secret", header, body, t + 31, 30)).toBe(false);
    expect(verifySignature("secret", header, body, t + 30, 30)).toBe(true);
  });

  it("refuses a header without a MAC, a fractional timestamp and a MAC of the wrong length", () => {
    const t = 1_700_000_000;
    const header = signPayload("secret", body, t);
    const mac = header.split(",v1=")[1]!;
    expect(verifySignature("secret", `t=${t}`, body, t)).toBe(false);
    expect(verifySignature("secret", `t=${t}.5,v1=${mac}`, body, t)).toBe(false);
    expect(verifySignature("secret", `t=${t},v1=${mac.slice(2)}`, body, t)).toBe(false);
    expect(verifySignature("secret", `t=${t},v1=${mac}00`, body, t)).toBe(false);
    // whitespace around the parts is tolerated, the order of the parts does not matter
    expect(verifySignature("secret", ` v1=${mac} , t=${t} `, body, t)).toBe(true);
  });
});
