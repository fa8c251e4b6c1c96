import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { KV } from "@nats-io/kv";
import { defaultTurnDetection } from "../schemas/realtime";
import { vadSessionKey, vadSpeakersKey } from "../schemas/realtime-internal";
import { emptyDiarization, savedDiarization } from "../domain/diarization/online";
import { createSessionStore } from "../domain/sessions/store";
import { loadVadEngine } from "../shared/audio/vad";
import { createLogger } from "../shared/logger";
import { restoreSession, type HandleEnv } from "../services/vad/session-state";
import { isolatedNats } from "./support/nats";

/**
 * A VAD replica taking a session over (a partition that changed owner) restores what the
 * last owner kept in KV: the settings and a diarizing session's speakers. Whatever the
 * value holds, the session goes on: garbage there gives the defaults, never a session
 * whose every message fails.
 */
let nats: Awaited<ReturnType<typeof isolatedNats>>;
let kv: KV;
let env: HandleEnv;
beforeAll(async () => {
  nats = await isolatedNats();
  kv = await nats.kv("leases");
  env = { engine: await loadVadEngine(), sessions: new Map(), defaults: defaultTurnDetection, nats, store: createSessionStore(nats), kv, pool: null, log: createLogger("error"), track: new Map(), labelling: { ms: 0 } };
});
afterAll(async () => {
  await nats?.destroy();
});

const start = (over: object = {}) => ({ kind: "start", turn_detection: { ...defaultTurnDetection, silence_duration_ms: 900 }, language: null, prompt: null, model: null, max_concurrent_utterances: 2, key_id: "key_1", diarize: true, ...over });
const speakers = () => {
  const state = emptyDiarization();
  state.speakers.push({ id: 0, stats: { n: 3, sum: Float64Array.from([1, 2]), outer: Float64Array.from([1, 2, 2, 4]) } });
  state.frames = 3;
  return state;
};

describe("restoreSession: a takeover's settings and speakers from KV", () => {
  it("given the settings and the speakers kept, restores both", async () => {
    await kv.put(vadSessionKey("sess_a"), JSON.stringify(start()));
    await kv.put(vadSpeakersKey("sess_a"), JSON.stringify(savedDiarization(speakers())));
    await restoreSession(env, "sess_a", 0);
    const s = env.sessions.get("sess_a")!;
    expect(s.decider.settings.turn_detection.silence_duration_ms).toBe(900);
    expect(s.speakers?.state).toEqual(speakers());
  });
  it("given values that are not JSON, starts from the defaults with no speakers", async () => {
    await kv.put(vadSessionKey("sess_b"), "{not json");
    await kv.put(vadSpeakersKey("sess_b"), "\u0000garbage");
    await restoreSession(env, "sess_b", 0);
    const s = env.sessions.get("sess_b")!;
    expect(s.decider.settings.turn_detection).toEqual(defaultTurnDetection);
    expect(s.speakers).toBeNull();
  });
  it("given good settings and speakers of the wrong shape, keeps the settings and starts the speakers afresh", async () => {
    await kv.put(vadSessionKey("sess_c"), JSON.stringify(start()));
    await kv.put(vadSpeakersKey("sess_c"), JSON.stringify({ speakers: [{ id: 0, n: 3, sum: [1, 2], outer: [1] }], mergedInto: {}, frames: 3 }));
    await restoreSession(env, "sess_c", 0);
    const s = env.sessions.get("sess_c")!;
    expect(s.decider.settings.turn_detection.silence_duration_ms).toBe(900);
    expect(s.speakers).toBeNull();
  });
});
