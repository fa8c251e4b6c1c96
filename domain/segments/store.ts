import { segmentEnvelope, type SegmentEvent } from "../../schemas/segment";
import { appendEvents } from "../../shared/event-store";
import type { Nats } from "../../shared/nats";
import { segmentEventId } from "./events";

/** The only write path of the segment audit stream. */
export interface SegmentStore {
  /** Appends to `segment.evt.<keyId>` with the deterministic id of events.ts (a repeat is stored once). */
  record(event: SegmentEvent): Promise<void>;
}

export function createSegmentStore(nats: Nats): SegmentStore {
  return {
    async record(event) {
      await appendEvents<SegmentEvent>(nats.js, segmentEnvelope, nats.topology.subjects.segmentEvent(event.data.keyId), [
        { type: event.type, data: event.data as never, msgId: segmentEventId(event), metadata: { correlationId: event.data.requestId } },
      ]);
    },
  };
}
