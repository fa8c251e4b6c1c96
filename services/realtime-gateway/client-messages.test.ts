import { describe, expect, it } from "vitest";
import { defaultTurnDetection } from "../../schemas/realtime";
import { readClientFrame, updateSettings, type SessionSettings } from "./client-messages";

const current: SessionSettings = {
  turnDetection: defaultTurnDetection,
  transcription: { language: null, prompt: null, model: null },
  partials: { partial_interval_ms: 300, interim_results: false, smart_format: true },
};

describe("session.update's turn_detection", () => {
  it("given semantic_vad on a streaming engine: eagerness auto and early events off unless given, the VAD settings kept", () => {
    expect(updateSettings(current, { turn_detection: { type: "semantic_vad" } }, true)).toEqual({
      ok: true,
      settings: { ...current, turnDetection: { ...defaultTurnDetection, type: "semantic_vad", eagerness: "auto", early_turn_events: false } },
    });
    const high = updateSettings(current, { turn_detection: { type: "semantic_vad", eagerness: "high", early_turn_events: true } }, true);
    expect(high.ok && high.settings.turnDetection).toMatchObject({ eagerness: "high", early_turn_events: true });
  });
  it("given a later update without a type, the session's type stays; back to server_vad drops the semantic fields", () => {
    const semantic = { ...current, turnDetection: { ...defaultTurnDetection, type: "semantic_vad" as const, eagerness: "low" as const, early_turn_events: true } };
    const kept = updateSettings(semantic, { turn_detection: { threshold: 0.5 } }, true);
    expect(kept.ok && kept.settings.turnDetection).toEqual({ ...semantic.turnDetection, threshold: 0.5 });
    const back = updateSettings(semantic, { turn_detection: { type: "server_vad" } }, true);
    expect(back.ok && back.settings.turnDetection).toEqual(defaultTurnDetection);
  });
  it("given an engine that cannot stream, semantic_vad is refused (semantic_vad_unavailable); server_vad changes still apply", () => {
    expect(updateSettings(current, { turn_detection: { type: "semantic_vad" } }, false)).toMatchObject({ ok: false, code: "semantic_vad_unavailable" });
    const silence = updateSettings(current, { turn_detection: { silence_duration_ms: 700 } }, false);
    expect(silence.ok && silence.settings.turnDetection.silence_duration_ms).toBe(700);
  });
  it("given settings out of range, invalid_event", () => {
    expect(updateSettings(current, { turn_detection: { silence_duration_ms: 50 } }, true)).toMatchObject({ ok: false, code: "invalid_event" });
  });
});

describe("session.update's keyterms", () => {
  const frame = (session: unknown) => readClientFrame(new TextEncoder().encode(JSON.stringify({ type: "session.update", event_id: "e1", session })).buffer as ArrayBuffer);
  it("given an array or a comma-separated string: trimmed, deduplicated terms; kept by a later update without them, cleared by []", () => {
    const read = frame({ input_audio_transcription: { keyterms: "Dashwood, prudently,dashwood" } });
    if (!read.ok || read.message.type !== "session.update") throw new Error("refused");
    const set = updateSettings(current, read.message.session, true);
    expect(set.ok && set.settings.transcription.keyterms).toEqual(["Dashwood", "prudently"]);
    const kept = set.ok ? updateSettings(set.settings, { input_audio_transcription: { prompt: "Chapter one" } }, true) : set;
    expect(kept.ok && kept.settings.transcription).toEqual({ language: null, prompt: "Chapter one", model: null, keyterms: ["Dashwood", "prudently"] });
    const cleared = kept.ok ? updateSettings(kept.settings, { input_audio_transcription: { keyterms: [] } }, true) : kept;
    expect(cleared.ok && cleared.settings.transcription.keyterms).toEqual([]);
  });
  it("given too many, too long or non-string terms: an error naming the field (param)", () => {
    expect(frame({ input_audio_transcription: { keyterms: Array.from({ length: 101 }, (_, i) => `t${i}`) } })).toMatchObject({ ok: false, code: "invalid_event", param: "session.input_audio_transcription.keyterms", clientEventId: "e1" });
    expect(frame({ input_audio_transcription: { keyterms: ["y".repeat(51)] } })).toMatchObject({ ok: false, param: "session.input_audio_transcription.keyterms", message: expect.stringMatching(/at most 50 characters/) });
    expect(frame({ input_audio_transcription: { keyterms: [3] } })).toMatchObject({ ok: false, param: expect.stringMatching(/^session\.input_audio_transcription\.keyterms/) });
  });
});
