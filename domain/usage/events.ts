import { z } from "zod";
import { envelopeOf } from "../../schemas/envelope";

/**
 * The one usage event every plane appends (subject `<prefix>.usage.evt.<keyId>`):
 * audio seconds consumed and requests counted. The usage projection folds these into
 * per-key billing windows that admission reads.
 */
const usagePlane = z.enum(["realtime", "segment", "batch"]);
type UsagePlane = z.infer<typeof usagePlane>;

const usageRecorded = z.object({
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
const usageEvent = z.discriminatedUnion("type", [usageRecorded]);
export type UsageEvent = z.infer<typeof usageEvent>;
export const usageEventEnvelope = envelopeOf(usageEvent);

/**
 * The one command of usage: record what a subject (a session, segment request or job)
 * consumed. `part` numbers the records of a subject that records more than once (a
 * realtime session every 30 s and at close); the others record once and leave it out.
 * The time comes in with the command.
 */
export type UsageCommand = {
  type: "RecordUsage";
  data: {
    keyId: string;
    ownerId: string;
    plane: UsagePlane;
    audioSeconds: number;
    requests: number;
    subjectId: string;
    part?: number;
    at: string;
  };
};
