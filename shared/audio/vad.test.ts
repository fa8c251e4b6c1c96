import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { defaultTurnDetection, VAD_TRAILING_MS } from "../../schemas/realtime";
import { loadVadEngine, type VadEvent } from "./vad";
import { pcm16MonoFromWav } from "./wav";
import { FIXTURES_DIR } from "../../test/support/fixtures";

const fixtures = FIXTURES_DIR;
const load = (name: string) => pcm16MonoFromWav(readFileSync(`${fixtures}/${name}`))!;

async function segment(pcm: Int16Array, chunk: number, settings = defaultTurnDetection) {
  const engine = await loadVadEngine();
  const seg = engine.createSegmenter(settings);
  const events: VadEvent[] = [];
  for (let i = 0; i < pcm.length; i += chunk) events.push(...seg.push(pcm.subarray(i, i + chunk)));
  events.push(...seg.commit("close"));
  seg.close();
  return events;
}

describe("VAD segmenter", () => {
  it("finds several utterances with pauses in silero_test.wav, events alternating in order", async () => {
    const pcm = load("silero_test.wav");
    const events = await segment(pcm, 1600);
    const kinds = events.map((e) => e.kind);
    const utterances = events.filter((e) => e.kind === "utterance");
    expect(utterances.length).toBeGreaterThanOrEqual(6);
    // started, stopped, utterance, started, stopped, utterance, ...
    for (let i = 0; i < kinds.length; i += 3) {
      expect(kinds.slice(i, i + 3)).toEqual(["speech_started", "speech_stopped", "utterance"]);
    }
    let previousEnd = -1;
    for (let i = 0; i < events.length; i += 3) {
      const started = events[i] as Extract<VadEvent, { kind: "speech_started" }>;
      const stopped = events[i + 1] as Extract<VadEvent, { kind: "speech_stopped" }>;
      const utt = events[i + 2] as Extract<VadEvent, { kind: "utterance" }>;
      expect(utt.audioStartMs).toBe(started.audioStartMs);
      expect(utt.audioEndMs).toBe(stopped.audioEndMs);
      expect(utt.audioEndMs).toBeGreaterThan(utt.audioStartMs);
      expect(utt.audioStartMs).toBeGreaterThanOrEqual(previousEnd);
      // the utterance audio is exactly its time range of the input
      const from = (utt.audioStartMs * 16000) / 1000;
      expect(Math.abs(utt.pcm.length - ((utt.audioEndMs - utt.audioStartMs) * 16000) / 1000)).toBeLessThanOrEqual(16);
      expect(Array.from(utt.pcm.subarray(100, 116))).toEqual(Array.from(pcm.subarray(from + 100, from + 116)));
      previousEnd = utt.audioEndMs;
    }
    // speech covers a real part of the clip but not all of it
    const speechMs = utterances.reduce((n, u) => n + (u as { audioEndMs: number; audioStartMs: number }).audioEndMs - (u as { audioStartMs: number }).audioStartMs, 0);
    expect(speechMs).toBeGreaterThan(15_000);
    expect(speechMs).toBeLessThan(57_000);
  });

  it("gives the same segmentation whatever the chunking", async () => {
    const pcm = load("silero_test.wav").subarray(0, 16000 * 20);
    const a = (await segment(pcm, 1600)).map((e) => (e.kind === "utterance" ? [e.kind, e.audioStartMs, e.audioEndMs] : e));
    const b = (await segment(pcm, 333)).map((e) => (e.kind === "utterance" ? [e.kind, e.audioStartMs, e.audioEndMs] : e));
    expect(b).toEqual(a);
  });

  it("finds nothing in silence and one utterance in jfk.wav-like continuous speech bounded by max length", async () => {
    expect(await segment(new Int16Array(16000 * 3), 1600)).toEqual([]);
    const jfk = load("jfk.wav");
    const events = await segment(jfk, 1600, { ...defaultTurnDetection, max_utterance_ms: 3000, silence_duration_ms: 800 });
    const utts = events.filter((e): e is Extract<VadEvent, { kind: "utterance" }> => e.kind === "utterance");
    expect(utts.length).toBeGreaterThanOrEqual(3);
    for (const u of utts) expect(u.audioEndMs - u.audioStartMs).toBeLessThanOrEqual(3030);
    expect(utts.some((u) => u.reason === "max_length")).toBe(true);
  });

  it("commit ends open speech; clear drops it", async () => {
    const engine = await loadVadEngine();
    const jfk = load("jfk.wav");
    const seg = engine.createSegmenter(defaultTurnDetection);
    const started = seg.push(jfk.subarray(0, 16000 * 2));
    expect(started.map((e) => e.kind)).toEqual(["speech_started"]);
    expect(seg.speaking).toBe(true);
    const committed = seg.commit();
    expect(committed.map((e) => e.kind)).toEqual(["speech_stopped", "utterance"]);
    expect((committed[1] as { reason: string }).reason).toBe("commit");
    expect(seg.commit()).toEqual([]);
    seg.push(jfk.subarray(16000 * 2, 16000 * 4));
    expect(seg.speaking).toBe(true);
    seg.clear();
    expect(seg.speaking).toBe(false);
    expect(seg.commit()).toEqual([]);
    seg.close();
  });

  it("skips redelivered audio by offset and realigns after a gap", async () => {
    const engine = await loadVadEngine();
    const jfk = load("jfk.wav");
    const once = engine.createSegmenter(defaultTurnDetection);
    const twice = engine.createSegmenter(defaultTurnDetection);
    const a: VadEvent[] = [];
    const b: VadEvent[] = [];
    for (let off = 0; off < jfk.length; off += 1600) {
      const chunk = jfk.subarray(off, off + 1600);
      a.push(...once.push(chunk, off));
      b.push(...twice.push(chunk, off));
      b.push(...twice.push(chunk, off)); // redelivered
    }
    expect(b.map((e) => e.kind)).toEqual(a.map((e) => e.kind));
    expect(twice.position).toBe(jfk.length);
    twice.push(new Int16Array(160), jfk.length + 16000); // one second lost
    expect(twice.position).toBe(jfk.length + 16000 + 160);
    once.close();
    twice.close();
  });

  it("an utterance's audio stays as cut until released, and a released buffer carries later audio", async () => {
    const pcm = load("silero_test.wav");
    const engine = await loadVadEngine();
    const seg = engine.createSegmenter(defaultTurnDetection);
    const other = engine.createSegmenter(defaultTurnDetection); // another session of the process
    const kept: { utt: Extract<VadEvent, { kind: "utterance" }>; copy: Int16Array }[] = [];
    const released = new Set<ArrayBufferLike>();
    let reused = 0;
    for (let i = 0; i < pcm.length; i += 640) {
      for (const s of [seg, other]) {
        for (const e of s.push(pcm.subarray(i, i + 640))) {
          if (e.kind !== "utterance") continue;
          if (released.has(e.pcm.buffer)) reused++;
          // where the session's timeline says it is: the same samples as the input
          const from = Math.round((e.audioStartMs * 16000) / 1000);
          expect(Buffer.from(e.pcm.buffer, e.pcm.byteOffset, e.pcm.byteLength).equals(Buffer.from(pcm.buffer, pcm.byteOffset + from * 2, e.pcm.length * 2))).toBe(true);
          if (s === seg) kept.push({ utt: e, copy: e.pcm.slice() });
          else {
            released.add(e.pcm.buffer);
            e.release?.();
          }
        }
      }
    }
    seg.close();
    other.close();
    // the kept ones (never released) were not written over by either session
    expect(kept.length).toBeGreaterThanOrEqual(6);
    for (const k of kept) expect(Buffer.from(k.utt.pcm.buffer, k.utt.pcm.byteOffset, k.utt.pcm.byteLength).equals(Buffer.from(k.copy.buffer))).toBe(true);
    // released buffers went on to carry later utterances
    expect(reused).toBeGreaterThan(0);
  });

  /**
   * Speech, a pause, speech, silence: fed frame by frame (30 ms), each event with the
   * timeline position (ms) at which the segmenter gave it.
   */
  async function segmentTimed(settings: typeof defaultTurnDetection, changeTo?: typeof defaultTurnDetection) {
    const jfk = load("jfk.wav");
    const parts = [jfk.subarray(0, 16000 * 4), new Int16Array(16000 * 0.6), jfk.subarray(16000 * 4, 16000 * 8), new Int16Array(16000 * 2)];
    const pcm = new Int16Array(parts.reduce((n, p) => n + p.length, 0));
    let at = 0;
    for (const p of parts) {
      pcm.set(p, at);
      at += p.length;
    }
    const engine = await loadVadEngine();
    const seg = engine.createSegmenter(settings);
    if (changeTo) seg.update(changeTo);
    const timed: { event: VadEvent; atMs: number }[] = [];
    for (let i = 0; i < pcm.length; i += 480) {
      for (const event of seg.push(pcm.subarray(i, i + 480))) timed.push({ event, atMs: ((i + 480) * 1000) / 16000 });
    }
    seg.close();
    return timed;
  }
  const vadStops = (timed: { event: VadEvent; atMs: number }[]) =>
    timed.flatMap(({ event, atMs }, k) => {
      const utt = timed[k + 1]?.event;
      return event.kind === "speech_stopped" && utt?.kind === "utterance" && utt.reason === "vad" ? [{ atMs, audioEndMs: event.audioEndMs, utt }] : [];
    });

  it("speech stops exactly silence_duration_ms after the last voiced frame; the utterance ends 200 ms of trailing audio after it", async () => {
    for (const silence of [300, 1200]) {
      const stops = vadStops(await segmentTimed({ ...defaultTurnDetection, silence_duration_ms: silence }));
      expect(stops.length).toBeGreaterThanOrEqual(1);
      for (const s of stops) {
        // decided when the silence had lasted its full length (both multiples of the 30 ms frame), no sooner, no later
        expect(s.atMs - (s.audioEndMs - VAD_TRAILING_MS)).toBe(silence);
        // speech_stopped and the utterance agree on where the speech ended
        expect(s.utt.kind === "utterance" && s.utt.audioEndMs).toBe(s.audioEndMs);
      }
    }
  });

  it("a longer silence_duration_ms carries speech across a pause a shorter one cuts at", async () => {
    const short = (await segmentTimed({ ...defaultTurnDetection, silence_duration_ms: 300 })).filter((t) => t.event.kind === "utterance");
    const long = (await segmentTimed({ ...defaultTurnDetection, silence_duration_ms: 1200 })).filter((t) => t.event.kind === "utterance");
    expect(long.length).toBeGreaterThanOrEqual(1);
    expect(short.length).toBeGreaterThan(long.length);
  });

  it("update() changes the silence a running segmenter waits for", async () => {
    const stops = vadStops(await segmentTimed({ ...defaultTurnDetection, silence_duration_ms: 300 }, { ...defaultTurnDetection, silence_duration_ms: 1200 }));
    expect(stops.length).toBeGreaterThanOrEqual(1);
    for (const s of stops) expect(s.atMs - (s.audioEndMs - VAD_TRAILING_MS)).toBe(1200);
  });
});
