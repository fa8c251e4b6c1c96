import { z } from "zod";
import { envelopeOf } from "./envelope";

/**
 * The one usage event every plane appends (subject `<prefix>.usage.evt.<keyId>`):
 * audio seconds consumed and requests counted. The usage projection folds these into
 * per-key billing windows that admission reads.
 */
export const usagePlane = z.enum(["realtime", "segment", "batch"]);
export type UsagePlane = z.infer<typeof usagePlane>;

export const usageRecorded = z.object({
  type: z.literal("UsageRecorded"),
  data: z.object({
    keyId: z.string(),
    ownerId: z.string(),
    plane: usagePlane,
    audioSeconds: z.number().nonnegative(),
    requests: z.number().int().nonnegative(),
    /** What the usage belongs to: a session id, segment request id or job id. */
    subjectId: z.string(),
    occurredAt: z.string(),
  }),
});
export const usageEvent = z.discriminatedUnion("type", [usageRecorded]);
export type UsageEvent = z.infer<typeof usageEvent>;
export const usageEventEnvelope = envelopeOf(usageEvent);
