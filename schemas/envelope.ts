import { z } from "zod";

/**
 * The event envelope every JetStream event carries: `{type, data, metadata}`.
 * Domain schemas define a discriminated union of `{type, data}` pairs; the store
 * validates the whole envelope on write and on read.
 */
const eventMetadata = z.object({
  eventId: z.string(),
  occurredAt: z.string(),
  /** Id of the command or event that caused this one. */
  causationId: z.string().optional(),
  /** Id shared by everything one request set in motion (request_id, session id). */
  correlationId: z.string().optional(),
  /** Schema version of `data` for this `type`; bump by adding a new version. */
  version: z.number().int().positive().default(1),
});
export type EventMetadata = z.infer<typeof eventMetadata>;

/** Builds the envelope schema for a union of `{type, data}` event shapes. */
export function envelopeOf<T extends z.ZodType<{ type: string; data: unknown }>>(events: T) {
  return z.intersection(events, z.object({ metadata: eventMetadata }));
}

export type Envelope<E extends { type: string; data: unknown }> = E & { metadata: EventMetadata };

/** An event read back from a stream, with its position. */
export interface Recorded<E extends { type: string; data: unknown }> {
  event: Envelope<E>;
  seq: number;
  subject: string;
  time: Date;
}
