import { describe, expect, it } from "vitest";
import { defaultTurnDetection } from "../../schemas/realtime";
import { applyBetaUpdate, applySessionUpdate, betaView, defaultDoorConfig, gaView, nativeSettings } from "./openai-config";

const vad = defaultTurnDetection;
const start = defaultDoorConfig(vad, null, null);

describe("OpenAI door: session config", () => {
  it("a GA update changes the fields present only; turn detection maps onto our VAD (clamped, shown as in effect)", () => {
    const r = applySessionUpdate(start, { type: "transcription", audio: { input: { turn_detection: { type: "server_vad", threshold: 0.05, silence_duration_ms: 50, prefix_padding_ms: 200 } } } }, vad);
    if (!r.ok) throw new Error("refused");
    expect(r.config.format).toBe("pcm");
    expect(r.config.turnDetection).toEqual({ type: "server_vad", threshold: 0.1, prefix_padding_ms: 200, silence_duration_ms: 100 });
    expect(nativeSettings(r.config, vad).turn_detection).toMatchObject({ type: "server_vad", threshold: 0.1, silence_duration_ms: 100, aggressiveness: vad.aggressiveness });
  });
  it("turn_detection null is our manual type; semantic_vad keeps its eagerness (auto when absent)", () => {
    const manual = applySessionUpdate(start, { type: "transcription", audio: { input: { turn_detection: null, format: { type: "audio/pcmu" } } } }, vad);
    if (!manual.ok) throw new Error("refused");
    expect(nativeSettings(manual.config, vad).turn_detection).toMatchObject({ type: "manual", max_utterance_ms: 30000 });
    expect(gaView(manual.config, "sess_1", 5).audio.input).toMatchObject({ format: { type: "audio/pcmu" }, turn_detection: null });
    const semantic = applySessionUpdate(start, { type: "transcription", audio: { input: { turn_detection: { type: "semantic_vad" } } } }, vad);
    expect(semantic.ok && nativeSettings(semantic.config, vad).turn_detection).toMatchObject({ type: "semantic_vad", eagerness: "auto" });
  });
  it("refuses a conversation session whole", () => {
    expect(applySessionUpdate(start, { type: "realtime", audio: { input: { turn_detection: null } } }, vad)).toMatchObject({ ok: false, error: { code: "invalid_value", param: "session.type" } });
  });
  it("beta flat fields: g711_alaw, transcription, include; shown flat", () => {
    const r = applyBetaUpdate(start, { input_audio_format: "g711_alaw", input_audio_transcription: { model: "whisper-1", language: "en" }, include: ["item.input_audio_transcription.logprobs"], turn_detection: { silence_duration_ms: 800 } }, vad);
    if (!r.ok) throw new Error("refused");
    expect(betaView(r.config, "sess_1", 5)).toMatchObject({ input_audio_format: "g711_alaw", input_audio_transcription: { model: "whisper-1", language: "en" }, turn_detection: { type: "server_vad", silence_duration_ms: 800 }, include: ["item.input_audio_transcription.logprobs"] });
    expect(nativeSettings(r.config, vad).input_audio_transcription).toEqual({ model: "whisper-1", language: "en", keyterms: [], partial_interval_ms: 300 });
  });
  it("keywords are the native keyterms, the first of languages is the language unless language is given, delay sets the partial interval and an auto eagerness", () => {
    const r = applySessionUpdate(
      start,
      { type: "transcription", audio: { input: { transcription: { keywords: ["Dashwood", "prudently"], languages: ["de", "en"], delay: "minimal" }, turn_detection: { type: "semantic_vad" } } } },
      vad,
    );
    if (!r.ok) throw new Error("refused");
    const native = nativeSettings(r.config, vad);
    expect(native.input_audio_transcription).toEqual({ language: "de", keyterms: ["Dashwood", "prudently"], partial_interval_ms: 100 });
    expect(native.turn_detection).toMatchObject({ type: "semantic_vad", eagerness: "high" });
    expect(gaView(r.config, "sess_1", 5).audio.input.transcription).toEqual({ keywords: ["Dashwood", "prudently"], languages: ["de", "en"], delay: "minimal" });
    const given = applySessionUpdate(start, { type: "transcription", audio: { input: { transcription: { language: "en", languages: ["de"], delay: "xhigh" }, turn_detection: { type: "semantic_vad", eagerness: "medium" } } } }, vad);
    if (!given.ok) throw new Error("refused");
    expect(nativeSettings(given.config, vad).input_audio_transcription).toMatchObject({ language: "en", partial_interval_ms: 1000 });
    expect(nativeSettings(given.config, vad).turn_detection).toMatchObject({ eagerness: "medium" });
    const beta = applyBetaUpdate(start, { input_audio_transcription: { keywords: ["Zorblax"], delay: "high" } }, vad);
    expect(beta.ok && nativeSettings(beta.config, vad).input_audio_transcription).toEqual({ keyterms: ["Zorblax"], partial_interval_ms: 600 });
  });

  it("the diarize extension goes to the native session as given, speaker_roles with it, for the native session to judge (a count without diarize too)", () => {
    const r = applySessionUpdate(start, { type: "transcription", audio: { input: { transcription: { diarize: true, max_speakers: 3, speaker_roles: { "0": "agent" } } } } }, vad);
    if (!r.ok) throw new Error("refused");
    expect(nativeSettings(r.config, vad).input_audio_transcription).toMatchObject({ diarize: true, max_speakers: 3, speaker_roles: { "0": "agent" } });
    const alone = applySessionUpdate(start, { type: "transcription", audio: { input: { transcription: { speakers: 2 } } } }, vad);
    expect(alone.ok && nativeSettings(alone.config, vad).input_audio_transcription).toMatchObject({ speakers: 2 });
    expect(alone.ok && nativeSettings(alone.config, vad).input_audio_transcription).not.toHaveProperty("diarize");
  });
});
