import { DeliverPolicy } from "@nats-io/jetstream";
import { rtEventEnvelope, type RtEvent } from "../../domain/sessions/events";
import type { Nats } from "../../shared/nats";
import { safeJson } from "../../shared/json";

export type StoredRecord = RtEvent & { metadata: { eventId: string } };

/**
 * Reads a session's records from rt.evt.<sessionId> in stream order with an ordered
 * consumer (one ephemeral consumer per read, deleted after), calling `onRecord` for
 * each until it answers true. With `waitMs` 0 the read ends at the last record stored
 * when it began; otherwise it also waits, up to `waitMs`, for records still to come
 * (a resume waits for the VAD's answer). Resolves true when `onRecord` ended it.
 * Records that do not parse are stepped over.
 */
export async function readSessionRecords(nats: Pick<Nats, "js" | "jsm" | "topology">, sessionId: string, onRecord: (record: StoredRecord) => boolean, { waitMs }: { waitMs: number }): Promise<boolean> {
  const stream = nats.topology.streams.rtEvents.name;
  const subject = nats.topology.subjects.rtEvent(sessionId);
  let lastSeq = 0;
  if (waitMs === 0) {
    const last = await nats.jsm.streams.getMessage(stream, { last_by_subj: subject }).catch(() => null);
    if (!last) return false;
    lastSeq = last.seq;
  }
  const deadline = Date.now() + waitMs;
  const consumer = await nats.js.consumers.get(stream, { filter_subjects: subject, deliver_policy: DeliverPolicy.All });
  try {
    while (true) {
      const left = deadline - Date.now();
      const batch = await consumer.fetch({ max_messages: 512, expires: waitMs === 0 ? 2000 : Math.max(1000, left) });
      let got = 0;
      for await (const m of batch) {
        got++;
        const parsed = rtEventEnvelope.safeParse(safeJson(m.string()));
        if (parsed.success && onRecord(parsed.data)) return true;
        if (waitMs === 0 && m.seq >= lastSeq) return false;
      }
      if (waitMs === 0 ? got === 0 : Date.now() >= deadline) return false;
    }
  } finally {
    await consumer.delete().catch(() => undefined);
  }
}

