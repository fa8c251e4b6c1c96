import type { JetStreamClient, JetStreamManager } from "@nats-io/jetstream";
import { describe, expect, it } from "vitest";
import type { ServerEvent, ServerEventOf } from "../../schemas/realtime";
import { topology } from "../../shared/nats";
import type { RtEvent } from "./events";
import { createSessionStore, sessionEventId } from "./store";

const sessionId = "sess_0123456789abcdef";
const item = "item_0123456789ab_00001230";
const server = (data: ServerEvent): RtEvent => ({ type: "rt.server_event", data });
const delta = (text: string): ServerEventOf<"conversation.item.input_audio_transcription.delta"> => ({ type: "conversation.item.input_audio_transcription.delta", event_id: "evt_1", item_id: item, content_index: 0, delta: text });
const opened = {
  session_id: sessionId,
  request_id: "req_1",
  key_id: "key_a",
  owner_id: "acme",
  plan: "pro",
  gateway_id: "gw_1",
  sample_rate: 16000,
  channels: 1,
};

describe("the event id rule: <sessionId>:<name>[:<key>]", () => {
  it("once-per-session facts: the fact's last word, no key", () => {
    expect(sessionEventId(sessionId, { type: "rt.session.opened", data: opened }, { kind: "session" })).toBe(`${sessionId}:opened`);
    expect(sessionEventId(sessionId, { type: "rt.session.closed", data: { session_id: sessionId, code: 1000, reason: "", audio_ms: 0, duration_ms: 5 } }, { kind: "session" })).toBe(`${sessionId}:closed`);
    expect(sessionEventId(sessionId, { type: "rt.session.flushed", data: { session_id: sessionId } }, { kind: "session" })).toBe(`${sessionId}:flushed`);
  });

  it("once-per-item events: the server event's type and the item", () => {
    expect(sessionEventId(sessionId, server(delta("hello")), { kind: "item", item })).toBe(`${sessionId}:conversation.item.input_audio_transcription.delta:${item}`);
  });

  it("partials: the item and where in it (words out before a delta, samples fed at an interim)", () => {
    expect(sessionEventId(sessionId, server(delta("hello")), { kind: "partial", item, at: 3 })).toBe(`${sessionId}:conversation.item.input_audio_transcription.delta:${item}:3`);
  });

  it("answers to a control: the control's place in the session", () => {
    expect(sessionEventId(sessionId, server({ type: "input_audio_buffer.cleared", event_id: "evt_9" }), { kind: "control", seq: 9 })).toBe(`${sessionId}:input_audio_buffer.cleared:control-9`);
  });

  it("a speaker label's fold: the folded label, whichever item folded it", () => {
    const merged = (itemId: string) => server({ type: "conversation.speaker.merged", event_id: "evt_m", item_id: itemId, from: "speaker_2", into: "speaker_0" });
    expect(sessionEventId(sessionId, merged(item), { kind: "speaker", speaker: "speaker_2" })).toBe(`${sessionId}:conversation.speaker.merged:speaker_2`);
    expect(sessionEventId(sessionId, merged("item_other"), { kind: "speaker", speaker: "speaker_2" })).toBe(`${sessionId}:conversation.speaker.merged:speaker_2`);
  });

  it("the client-facing event_id plays no part: the same fact written again gets the same id", () => {
    const a = sessionEventId(sessionId, server({ ...delta("hello"), event_id: "evt_a" }), { kind: "item", item });
    const b = sessionEventId(sessionId, server({ ...delta("hello"), event_id: "evt_b" }), { kind: "item", item });
    expect(a).toBe(b);
  });
});

/** A JetStream client that records what is published (the store's I/O is nats.js, run for real in test/realtime*.test.ts). */
function recordingNats() {
  const published: { subject: string; msgID: string; timeout: number; body: { type: string; data: unknown; metadata: { eventId: string; correlationId?: string } } }[] = [];
  const js = {
    publish: async (subject: string, payload: string, options: { msgID: string; timeout: number }) => {
      published.push({ subject, msgID: options.msgID, timeout: options.timeout, body: JSON.parse(payload) });
      return { seq: published.length, duplicate: false, stream: "S" };
    },
  } as unknown as JetStreamClient;
  return { published, nats: { js, jsm: {} as JetStreamManager, topology: topology("t") } };
}

describe("the store's appends", () => {
  it("lifecycle facts get deterministic ids, so a repeat is one event", async () => {
    const { published, nats } = recordingNats();
    const store = createSessionStore(nats);
    await store.opened(opened);
    await store.opened(opened);
    await store.closed({ session_id: sessionId, code: 1000, reason: "", audio_ms: 1200, duration_ms: 3000 });
    expect(published.map((p) => [p.subject, p.msgID, p.body.type])).toEqual([
      [`t.rt.evt.${sessionId}`, `${sessionId}:opened`, "rt.session.opened"],
      [`t.rt.evt.${sessionId}`, `${sessionId}:opened`, "rt.session.opened"],
      [`t.rt.evt.${sessionId}`, `${sessionId}:closed`, "rt.session.closed"],
    ]);
    // the envelope's eventId is the id too, and every record names its session
    expect(published[0]!.body.metadata).toMatchObject({ eventId: `${sessionId}:opened`, correlationId: sessionId });
    expect(published[0]!.body.data).toEqual(opened);
  });

  it("partials and outcomes: ids by item (and place), payloads as given", async () => {
    const { published, nats } = recordingNats();
    const store = createSessionStore(nats);
    await store.appendPartials(sessionId, item, [{ event: delta("hello"), at: 0 }]);
    await store.appendOutcome(sessionId, item, [delta("hello world")]);
    expect(published.map((p) => p.msgID)).toEqual([`${sessionId}:conversation.item.input_audio_transcription.delta:${item}:0`, `${sessionId}:conversation.item.input_audio_transcription.delta:${item}`]);
    expect(published.map((p) => p.body.data)).toEqual([delta("hello"), delta("hello world")]);
    // the VAD's appends wait longer (pipelined behind a partition's ack) than the transcriber's
    expect(published.map((p) => p.timeout)).toEqual([10_000, 5_000]);
  });
});
