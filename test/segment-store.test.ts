import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { segmentFailed, segmentTranscribed, type SegmentRequest } from "../domain/segments/events";
import { createSegmentStore } from "../domain/segments/store";
import { segmentEnvelope } from "../schemas/segment";
import { loadEvents } from "../shared/event-store";
import { isolatedNats } from "./support/nats";

let nats: Awaited<ReturnType<typeof isolatedNats>>;
beforeAll(async () => {
  nats = await isolatedNats();
});
afterAll(async () => {
  await nats?.destroy();
});

describe("segment store on JetStream", () => {
  it("stores an outcome repeated for the same request once, under the id from the request; the other outcome beside it", async () => {
    const store = createSegmentStore(nats);
    const request: SegmentRequest = { requestId: "seg_store", keyId: "key_store", ownerId: "o", model: "stt-1", audioSeconds: 1, bytes: 10, responseFormat: "json" };
    const done = segmentTranscribed(request, { workerId: "w", fallbackUsed: false, workerMs: 1, totalMs: 2, textChars: 3 });
    await store.record(done);
    await store.record(done); // a retried append
    await store.record(segmentFailed(request, { code: "usage_unavailable", message: "m", totalMs: 4 }));
    const { events } = await loadEvents(nats.js, nats.jsm, nats.topology.streams.segments.name, segmentEnvelope, nats.topology.subjects.segmentEvent("key_store"));
    expect(events.map((e) => [e.event.type, e.event.metadata.eventId, e.event.metadata.correlationId])).toEqual([
      ["SegmentTranscribed", "seg_store:SegmentTranscribed", "seg_store"],
      ["SegmentFailed", "seg_store:SegmentFailed", "seg_store"],
    ]);
  });
});
