import { describe, expect, it } from "vitest";
import { defaultTurnDetection, type ServerEvent } from "../../schemas/realtime";
import { openAiServerEvent, type OpenAiServerEvent } from "../../schemas/openai-realtime";
import { defaultDoorConfig, type DoorConfig } from "./openai-config";
import { logprobsOf, newDoorState, readOpenAiFrame, translateServerEvent, type DoorState } from "./openai-events";

const T = "conversation.item.input_audio_transcription";
const ctx = () => {
  let n = 0;
  return { eventId: () => `event_${++n}`, sessionId: "sess_1", expiresAt: 1000 };
};
const ga = (change: Partial<DoorConfig> = {}) => newDoorState({ ...defaultDoorConfig(defaultTurnDetection, "gpt-4o-transcribe", null), ...change }, false);

/** given(state).when(native events).then(OpenAI event types / shapes) */
function when(state: DoorState, ...events: ServerEvent[]): OpenAiServerEvent[] {
  const c = ctx();
  const out = events.flatMap((e) => translateServerEvent(state, e, c));
  for (const e of out) expect(openAiServerEvent.safeParse(e).success, JSON.stringify(e)).toBe(true);
  return out;
}

const committed = (item: string, previous: string | null = null): ServerEvent => ({ type: "input_audio_buffer.committed", event_id: "n", item_id: item, previous_item_id: previous, audio_start_ms: 0, audio_end_ms: 1500, reason: "vad" });
const delta = (item: string, text: string): ServerEvent => ({ type: `${T}.delta`, event_id: "n", item_id: item, content_index: 0, delta: text });
const completed = (item: string): ServerEvent => ({
  type: `${T}.completed`,
  event_id: "n",
  item_id: item,
  content_index: 0,
  transcript: "Ask not.",
  language: "en",
  audio_start_ms: 500,
  audio_end_ms: 2000,
  words: [
    { word: "ask", punctuated_word: "Ask", start_ms: 500, end_ms: 900, probability: 0.5 },
    { word: "not", punctuated_word: "not.", start_ms: 900, end_ms: 1200 },
  ],
  worker_id: "w",
  fallback_used: false,
  worker_ms: 10,
  queue_ms: 0,
});

describe("OpenAI door: native events → OpenAI's", () => {
  it("session.created is the GA transcription session (beta: transcription_session.created with flat fields)", () => {
    const created: ServerEvent = { type: "session.created", request_id: "r", session_id: "sess_1", audio: { format: "pcm_s16le", sample_rate: 16000, channels: 1 }, turn_detection: defaultTurnDetection, plan: "pro", limits: { max_concurrent_utterances: 1, max_session_seconds: 60, idle_timeout_seconds: 30, remaining_audio_seconds: 10 } };
    const [g] = when(ga(), created);
    expect(g).toMatchObject({ type: "session.created", session: { type: "transcription", object: "realtime.transcription_session", id: "sess_1", audio: { input: { format: { type: "audio/pcm", rate: 24000 }, transcription: { model: "gpt-4o-transcribe" }, turn_detection: { type: "server_vad", threshold: 0.6, prefix_padding_ms: 300, silence_duration_ms: 500 } } }, include: null } });
    const [b] = when(newDoorState(ga().config, true), created);
    expect(b).toMatchObject({ type: "transcription_session.created", session: { input_audio_format: "pcm16", turn_detection: { type: "server_vad" }, client_secret: null } });
  });

  it("committed becomes committed, item.added and item.done (beta: item.created); completed carries usage as duration", () => {
    expect(when(ga(), committed("item_1", "item_0"), completed("item_1")).map((e) => e.type)).toEqual(["input_audio_buffer.committed", "conversation.item.added", "conversation.item.done", `${T}.completed`]);
    expect(when(newDoorState(ga().config, true), committed("item_1")).map((e) => e.type)).toEqual(["input_audio_buffer.committed", "conversation.item.created"]);
    const [, , , done] = when(ga(), committed("item_1"), completed("item_1"));
    expect(done).toEqual({ type: `${T}.completed`, event_id: "event_4", item_id: "item_1", content_index: 0, transcript: "Ask not.", usage: { type: "duration", seconds: 1.5 } });
  });

  it("with diarize: completed carries speaker and speaker_role, and a fold goes out as the native extension event (not without transcription)", () => {
    const labelled: ServerEvent = { ...completed("item_2"), speaker: "speaker_0", speaker_role: "agent" } as ServerEvent;
    const merged: ServerEvent = { type: "conversation.speaker.merged", event_id: "n", item_id: "item_2", from: "speaker_1", into: "speaker_0" };
    const out = when(ga(), committed("item_2"), merged, labelled);
    expect(out.slice(3)).toEqual([
      { type: "conversation.speaker.merged", event_id: "event_4", item_id: "item_2", from: "speaker_1", into: "speaker_0" },
      expect.objectContaining({ type: `${T}.completed`, item_id: "item_2", speaker: "speaker_0", speaker_role: "agent" }),
    ]);
    expect(when(ga({ transcription: null }), merged)).toEqual([]);
  });

  it("exactly one completed or failed per item", () => {
    const failed: ServerEvent = { type: `${T}.failed`, event_id: "n", item_id: "item_1", content_index: 0, error: { type: "server_error", code: "engine_failed", message: "x" } };
    expect(when(ga(), committed("item_1"), completed("item_1"), completed("item_1"), failed).filter((e) => e.type.startsWith(T)).length).toBe(1);
  });

  it("server_vad: deltas go out while spoken; manual: held until the item is committed, and no speech_started", () => {
    expect(when(ga(), delta("item_1", "ask"), committed("item_1")).map((e) => e.type)).toEqual([`${T}.delta`, "input_audio_buffer.committed", "conversation.item.added", "conversation.item.done"]);
    const manual = ga({ turnDetection: null });
    const out = when(manual, { type: "input_audio_buffer.speech_started", event_id: "n", item_id: "item_1", audio_start_ms: 0 }, delta("item_1", "ask"), delta("item_1", " not"), committed("item_1"));
    expect(out.map((e) => e.type)).toEqual(["input_audio_buffer.committed", "conversation.item.added", "conversation.item.done", `${T}.delta`, `${T}.delta`]);
  });

  it("logprobs with include: one token per formatted word, ln of the confidence (none: 0)", () => {
    const [, , , done] = when(ga({ include: ["item.input_audio_transcription.logprobs"] }), committed("item_1"), completed("item_1"));
    expect(done).toMatchObject({ logprobs: [{ token: "Ask", logprob: Math.log(0.5), bytes: [65, 115, 107] }, { token: " not.", logprob: 0 }] });
    expect(logprobsOf([{ word: "twenty", punctuated_word: "25%", start_ms: 0, end_ms: 1 }, { word: "five", punctuated_word: "", start_ms: 1, end_ms: 2 }]).map((l) => l.token)).toEqual(["25%"]);
  });

  it("a native error gets param and restores the config of a refused update; transcription null sends no transcripts", () => {
    const s = ga();
    const before = s.config;
    s.updating = { previous: before };
    s.config = { ...before, turnDetection: { type: "semantic_vad", eagerness: "low" } };
    const [e] = when(s, { type: "error", event_id: "n", error: { type: "invalid_request_error", code: "semantic_vad_unavailable", message: "m", event_id: "c1" } });
    expect(e).toMatchObject({ error: { code: "semantic_vad_unavailable", param: "session.audio.input.turn_detection.type", event_id: "c1" } });
    expect(s.config).toBe(before);
    expect(when(ga({ transcription: null }), committed("item_1"), delta("item_1", "x"), completed("item_1")).map((e) => e.type)).toEqual(["input_audio_buffer.committed", "conversation.item.added", "conversation.item.done"]);
  });
});

describe("OpenAI door: client frames", () => {
  it("answers invalid JSON, unknown and conversation-only types, and bad fields in OpenAI's error shape", () => {
    expect(readOpenAiFrame("{nope")).toEqual({ ok: false, error: { type: "invalid_request_error", code: "invalid_json", message: expect.any(String), param: null, event_id: null } });
    expect(readOpenAiFrame(JSON.stringify({ type: "bogus", event_id: "c1" }))).toMatchObject({ ok: false, error: { code: "invalid_value", param: "type", event_id: "c1" } });
    expect(readOpenAiFrame(JSON.stringify({ type: "response.create" }))).toMatchObject({ ok: false, error: { code: "invalid_value", param: "type" } });
    expect(readOpenAiFrame(JSON.stringify({ type: "session.update", session: { type: "transcription", audio: { input: { format: { type: "audio/opus" } } } } }))).toMatchObject({
      ok: false,
      error: { code: "invalid_value", param: "session.audio.input.format.type" },
    });
    expect(readOpenAiFrame(JSON.stringify({ type: "session.update", session: { type: "transcription", audio: { input: { format: { type: "audio/pcm", rate: 16000 } } } } }))).toMatchObject({ ok: false, error: { param: "session.audio.input.format.rate" } });
    expect(readOpenAiFrame(JSON.stringify({ type: "input_audio_buffer.append" }))).toMatchObject({ ok: false, error: { code: "missing_required_parameter", param: "audio" } });
    expect(readOpenAiFrame(JSON.stringify({ type: "input_audio_buffer.append", audio: "AAAA", event_id: "a" }))).toMatchObject({ ok: true, clientEventId: "a" });
    expect(readOpenAiFrame(JSON.stringify({ type: "session.input_audio_buffer.append", audio: "AAAA" }))).toMatchObject({ ok: true });
  });
  it("refuses bad keywords and languages with their param", () => {
    const update = (transcription: unknown) => readOpenAiFrame(JSON.stringify({ type: "session.update", event_id: "k", session: { type: "transcription", audio: { input: { transcription } } } }));
    const tooLong = update({ keywords: ["x".repeat(51)] });
    expect(tooLong).toMatchObject({ ok: false, error: { code: "invalid_value", param: "session.audio.input.transcription.keywords", event_id: "k" } });
    expect(!tooLong.ok && tooLong.error.message).toMatch(/at most 50 characters/);
    expect(update({ keywords: Array.from({ length: 101 }, (_, i) => `term${i}`) })).toMatchObject({ ok: false, error: { param: "session.audio.input.transcription.keywords" } });
    expect(update({ keywords: [7] })).toMatchObject({ ok: false, error: { param: expect.stringMatching(/^session\.audio\.input\.transcription\.keywords/) } });
    expect(update({ languages: ["english"] })).toMatchObject({ ok: false, error: { param: "session.audio.input.transcription.languages.0" } });
    expect(update({ keywords: ["Dashwood", " prudently "], languages: ["en"], delay: "low" })).toMatchObject({ ok: true, event: { session: { audio: { input: { transcription: { keywords: ["Dashwood", "prudently"] } } } } } });
  });
});
