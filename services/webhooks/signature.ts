import { createHmac, timingSafeEqual } from "node:crypto";

/**
 * Webhook signatures. Every delivery carries
 *
 *   X-STT-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>
 *
 * A receiver recomputes the HMAC over the timestamp, a dot and the raw request body
 * with the shared secret (WEBHOOK_SIGNING_SECRET), compares in constant time, and
 * rejects timestamps too far from its clock (replay protection; 5 minutes here).
 */
export const SIGNATURE_HEADER = "x-stt-signature";

export function signPayload(secret: string, body: string, timestampSeconds: number): string {
  const mac = createHmac("sha256", secret).update(`${timestampSeconds}.${body}`).digest("hex");
  return `t=${timestampSeconds},v1=${mac}`;
}

/** Checks a signature header; constant-time on the MAC, bounded clock skew. */
export function verifySignature(secret: string, header: string | undefined, body: string, nowSeconds: number, toleranceSeconds = 300): boolean {
  if (!header) return false;
  const parts = Object.fromEntries(
    header.split(",").map((p) => {
      const i = p.indexOf("=");
      return [p.slice(0, i).trim(), p.slice(i + 1).trim()];
    }),
  );
  const t = Number(parts.t);
  if (!Number.isInteger(t) || Math.abs(nowSeconds - t) > toleranceSeconds || typeof parts.v1 !== "string") return false;
  const expected = Buffer.from(createHmac("sha256", secret).update(`${t}.${body}`).digest("hex"));
  const given = Buffer.from(parts.v1);
  return given.length === expected.length && timingSafeEqual(given, expected);
}
