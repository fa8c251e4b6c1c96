import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { JobView } from "../schemas/jobs";
import { encodeWav } from "../shared/audio/wav";
import { longConversation, type ConversationTurn } from "./support/conversations";
import { randomHex, serveAudio, submitJob, waitForJobEnd, type LocalHttp } from "./support/jobs-helpers";
import { startStack, type Stack } from "./support/stack";
import { startProviderServer, type ProviderServer } from "./support/workers-provider-server";

/**
 * The speaker count on a long recording (docs/diarization.md, "The embedded diarizer"):
 * 30 minutes of three voices of the test data taking turns (support/conversations.ts:
 * JFK, the TIMIT speaker and the silero reader, the first three of the bench's speakers),
 * diarized with the count estimated on the segment plane and in a batch job, come back
 * with 2 to 4 speakers: 4 (diarize.ts `longVoiceSeconds`; without that join, 5: one
 * voice's material split by what was said).
 *
 * What is tested is the diarizer on the real audio, not transcription: the engine is a
 * real local HTTP server standing in for an OpenAI-compatible provider
 * (support/workers-provider-server.ts), answering a word every half second of each
 * clip it is sent, so every turn has words to carry its speaker. The upload limit is
 * raised for the 58 MB WAV (the segment plane's default is 25 MB).
 */
const VOICES = ["jfk", "timit", "silero"];
const { pcm, turns } = longConversation(VOICES, 30, 31);
const WAV = encodeWav(pcm);

let provider: ProviderServer;
let stack: Stack;
let audio: LocalHttp;
let key: string;

beforeAll(async () => {
  provider = await startProviderServer("half-second-words");
  provider.behaviour.timedWords = (clip) => Array.from({ length: Math.floor(clip.length / 8000) }, (_, i) => ({ word: "word", start: i * 0.5, end: i * 0.5 + 0.4 }));
  // a real-time factor of 1: 45 s for each 30 s piece (the default 0.1 gives 4.75 s). The
  // provider answers at once; what is tested is the diarizer, and on a loaded machine
  // (two stacks and a diarization run at once) the default once answered 502
  stack = await startStack({ WORKER_EMBEDDED: "none", WORKER_OPENAI_URL: provider.url, WORKER_OPENAI_REAL_TIME_FACTOR: "1", SEGMENT_MAX_UPLOAD_BYTES: String(64 * 1024 * 1024) });
  ({ key } = await stack.issueKey("pro", `tenant-diarize-long-${randomHex()}`));
  audio = await serveAudio(WAV);
}, 120_000);

afterAll(async () => {
  await stack?.stop();
  await provider?.close();
  await audio?.stop();
});

/** Per label, the seconds of each voice its words fall in (for the log: which voice a label stands for). */
function labelsByVoice(items: { start: number; end: number; speaker?: number }[], reference: ConversationTurn[]): Map<number, Record<string, number>> {
  const out = new Map<number, Record<string, number>>();
  for (const w of items) {
    if (w.speaker === undefined) continue;
    const mid = (w.start + w.end) / 2;
    const voice = reference.find((t) => t.start <= mid && mid < t.end)?.speaker ?? "gap";
    const row = out.get(w.speaker) ?? {};
    row[voice] = (row[voice] ?? 0) + (w.end - w.start);
    out.set(w.speaker, row);
  }
  return out;
}

function expectTwoToFourSpeakers(plane: string, items: { start: number; end: number; speaker?: number }[]) {
  const labels = labelsByVoice(items, turns);
  console.log(`${plane}: ${labels.size} speakers`, JSON.stringify(Object.fromEntries([...labels].map(([k, row]) => [k, Object.fromEntries(Object.entries(row).map(([v, s]) => [v, Math.round(s)]))]))));
  expect(items.every((w) => w.speaker !== undefined)).toBe(true);
  expect(labels.size).toBeGreaterThanOrEqual(2);
  expect(labels.size).toBeLessThanOrEqual(4);
}

describe("a 30-minute recording of three voices, the count estimated", () => {
  it("segment plane: diarize=true gives its words 2 to 4 speakers", { timeout: 300_000 }, async () => {
    expect(pcm.length / 16_000 / 60).toBeGreaterThanOrEqual(30);
    expect(new Set(turns.map((t) => t.speaker))).toEqual(new Set(VOICES));
    const form = new FormData();
    form.set("file", new Blob([new Uint8Array(WAV)], { type: "audio/wav" }), "long.wav");
    form.set("diarize", "true");
    form.set("response_format", "verbose_json");
    const res = await stack.fetch("/v1/audio/transcriptions", { method: "POST", headers: { authorization: `Bearer ${key}` }, body: form });
    expect(res.status, await res.clone().text()).toBe(200);
    const r = (await res.json()) as { words: { start: number; end: number; speaker?: number }[] };
    expect(r.words.length).toBeGreaterThan(1000);
    expectTwoToFourSpeakers("segment plane", r.words);
  });

  it("batch job: diarize gives its segments 2 to 4 speakers", { timeout: 300_000 }, async () => {
    const { status, workflowId } = await submitJob(stack.fetch, key, { audio_url: `${audio.url}/long.wav`, diarize: true });
    expect(status).toBe(202);
    const view: JobView = await waitForJobEnd(stack.fetch, key, workflowId, { timeoutMs: 280_000 });
    expect(view.status).toBe("complete");
    const segments = view.output!.result.segments.filter((s) => s.text.trim());
    expect(segments.length).toBeGreaterThan(100);
    expectTwoToFourSpeakers("batch job", segments.map((s) => ({ start: s.start_time, end: s.end_time, speaker: s.speaker })));
  });
});
