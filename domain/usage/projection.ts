import { sql } from "kysely";
import { usageEventEnvelope, type UsageEvent } from "./events";
import type { Topology } from "../../shared/nats";
import type { Projection } from "../../shared/projection";
import { windowStart } from "./quota";

/** UsageRecorded → usage_windows (one row per key per billing window). */
export function usageProjection(topology: Topology, windowSeconds: number): Projection<UsageEvent> {
  return {
    name: "usage_windows",
    stream: topology.streams.usage.name,
    filterSubject: topology.subjects.usageEvents,
    schema: usageEventEnvelope,
    tables: ["usage_windows"],
    async apply(trx, { event }) {
      const d = event.data;
      const start = windowStart(new Date(d.occurredAt), windowSeconds);
      await trx
        .insertInto("usage_windows")
        .values({ key_id: d.keyId, owner_id: d.ownerId, window_start: start, audio_seconds: d.audioSeconds, requests: d.requests, updated_at: new Date() })
        .onConflict((oc) =>
          oc.columns(["key_id", "window_start"]).doUpdateSet({
            audio_seconds: sql`usage_windows.audio_seconds + excluded.audio_seconds`,
            requests: sql`usage_windows.requests + excluded.requests`,
            updated_at: sql`excluded.updated_at`,
          }),
        )
        .execute();
    },
  };
}
