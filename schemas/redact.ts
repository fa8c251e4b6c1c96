import { z } from "zod";

/**
 * What a request, job or realtime session asks to redact (docs/formatting.md
 * "Redaction"): `pci` card numbers with their expiry and security code, `ssn`, `phone`,
 * `email`, `numbers` (any number), `pii` (all of them, and the names and terms of the
 * job's metadata or the request's prompt).
 */
export const REDACT_ENTITIES = ["pci", "ssn", "phone", "email", "numbers", "pii"] as const;
export type RedactEntity = (typeof REDACT_ENTITIES)[number];

const isEntity = (v: string): v is RedactEntity => (REDACT_ENTITIES as readonly string[]).includes(v);

/**
 * `redact` as sent: one value, comma-separated values, or repeated values (an array);
 * parsed to the distinct entities in the documented order. Anything else is one clear
 * validation error naming the values allowed.
 */
export const redactList = z.union([z.string(), z.array(z.string())]).transform((v, ctx): RedactEntity[] => {
  const values = (Array.isArray(v) ? v : [v]).flatMap((s) => s.split(",")).map((s) => s.trim().toLowerCase()).filter(Boolean);
  const bad = values.filter((s) => !isEntity(s));
  if (bad.length || values.length === 0) {
    ctx.addIssue({ code: "custom", message: `redact must be one or more of ${REDACT_ENTITIES.join(", ")} (comma-separated or repeated); got ${JSON.stringify(bad[0] ?? "")}` });
    return z.NEVER;
  }
  return REDACT_ENTITIES.filter((e) => values.includes(e));
});
