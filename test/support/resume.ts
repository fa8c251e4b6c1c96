import { expect } from "vitest";
import { concatPcm } from "./fixtures";
import { connectRt, fixture, silence, wsUrl, type RtClient } from "./realtime-support";
import { readSessionRecords } from "../../services/realtime-gateway/session-records";
import type { Nats } from "../../shared/nats";

/** Helpers of the resume tests (test/realtime-resume*.test.ts; docs/realtime-resume.md). */
export const isOutcome = (e: any) => e.type === "conversation.item.input_audio_transcription.completed" || e.type === "conversation.item.input_audio_transcription.failed";

/** jfk.wav twice with pauses: utterances to cut inside and between. */
export function speech(): Int16Array {
  const jfk = fixture("jfk.wav");
  return concatPcm(jfk, silence(1.5), jfk, silence(1.5));
}

/** The id to resume after: the last event the client processed that has one. */
export const lastEventId = (events: any[]) => [...events].reverse().find((e) => typeof e.event_id === "string")?.event_id ?? null;

/**
 * A multichannel session's positions, comma-separated in channel order: per channel the
 * id of the last event carrying that `channel`, the gateway's own events (no `channel`)
 * counting as channel 0's; empty for a channel that had none.
 */
export function lastEventIds(events: any[], channels: number): string {
  const last: string[] = Array.from({ length: channels }, () => "");
  for (const e of events) if (typeof e.event_id === "string") last[e.channel ?? 0] = e.event_id;
  return last.join(",");
}

/** Cuts the TCP connection under the WebSocket: no close frame, the server sees 1006. */
export function cut(c: RtClient) {
  (c.ws as unknown as { _socket: { destroy(): void } })._socket.destroy();
}

export async function resume(base: string, credential: string, after: string | null, key: string): Promise<RtClient> {
  const q = `resume=${encodeURIComponent(credential)}${after ? `&last_event_id=${encodeURIComponent(after)}` : ""}`;
  return connectRt(wsUrl(base, q), { authorization: `Bearer ${key}` });
}

/** Waits until every committed item among `events` has its outcome. */
export async function outcomes(events: () => any[], timeoutMs = 120_000) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const es = events();
    const items = es.filter((e) => e.type === "input_audio_buffer.committed").map((e) => e.item_id);
    const done = new Set(es.filter(isOutcome).map((e) => e.item_id));
    if (items.length > 0 && items.every((i) => done.has(i))) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error("timed out waiting for the outcomes of the committed items");
}

/** What a run produced, comparable across sessions: per committed item its place on the timeline and its transcript. */
export function finals(events: any[]) {
  const committed = events.filter((e) => e.type === "input_audio_buffer.committed");
  return committed.map((m) => {
    const out = events.filter((e) => isOutcome(e) && e.item_id === m.item_id);
    return { start: m.audio_start_ms, end: m.audio_end_ms, outcomes: out.length, transcript: out[0]?.transcript ?? out[0]?.error?.code };
  });
}

/** Closes gracefully (every transcript delivered, 1000). */
export async function finish(c: RtClient) {
  c.sendJson({ type: "session.close" });
  expect((await c.closed).code).toBe(1000);
}

/** The items a session (or a multichannel session's lane) stored as committed. */
export async function storedItems(nats: Nats, sessionId: string): Promise<string[]> {
  const stored: string[] = [];
  await readSessionRecords(nats, sessionId, (r) => (r.type === "rt.server_event" && r.data.type === "input_audio_buffer.committed" && stored.push(r.data.item_id), false), { waitMs: 0 });
  return stored;
}

/** Waits until the session's (or lane's) stream holds an item's commit or outcome the client has not seen (up to 60 s). */
export async function storedBeyond(nats: Nats, sessionId: string, seen: any[]) {
  const kinds = ["input_audio_buffer.committed", "conversation.item.input_audio_transcription.completed", "conversation.item.input_audio_transcription.failed"];
  const known = new Set(seen.filter((e) => kinds.includes(e.type)).map((e) => `${e.type} ${e.item_id}`));
  for (const deadline = Date.now() + 60_000; Date.now() < deadline; await new Promise((r) => setTimeout(r, 200))) {
    const stored: string[] = [];
    await readSessionRecords(nats, sessionId, (r) => (r.type === "rt.server_event" && kinds.includes(r.data.type) && stored.push(`${r.data.type} ${(r.data as { item_id: string }).item_id}`), false), { waitMs: 0 });
    if (stored.some((k) => !known.has(k))) return;
  }
  throw new Error("nothing was decided while the client was away");
}
