import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { defaultTurnDetection, VAD_TRAILING_MS } from "../../schemas/realtime";
import { loadVadEngine, type VadEvent } from "./vad";
import { pcm16MonoFromWav } from "./wav";
import { concatPcm, FIXTURES_DIR } from "../../test/support/fixtures";

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

const concat = concatPcm;

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

  it("openAudio gives the open utterance's audio so far, which is what the utterance then carries", async () => {
    const engine = await loadVadEngine();
    const jfk = load("jfk.wav");
    const seg = engine.createSegmenter(defaultTurnDetection);
    expect(seg.openAudio(0)).toBeNull(); // nothing open
    const events: VadEvent[] = [];
    const pushed = 480 * 67; // 2.01 s in 30 ms pushes
    for (let i = 0; i < pushed; i += 480) events.push(...seg.push(jfk.subarray(i, i + 480)));
    const started = events.find((e) => e.kind === "speech_started") as { audioStartMs: number };
    const from = started.audioStartMs * 16;
    const soFar = seg.openAudio(from)!;
    // whole 30 ms frames up to what was pushed, equal to the input
    expect(soFar.length).toBeGreaterThan(16000 * 1);
    expect(from + soFar.length).toBeLessThanOrEqual(pushed);
    expect(pushed - (from + soFar.length)).toBeLessThan(480);
    expect(Array.from(soFar.subarray(0, 4000))).toEqual(Array.from(jfk.subarray(from, from + 4000)));
    expect(seg.openAudio(from - 1)).toBeNull(); // before the utterance
    // openTail: the same audio from a later sample, or from the utterance's start when asked for more
    expect(seg.openTail(from - 16000)).toEqual({ from, pcm: soFar });
    const tail = seg.openTail(from + 8000)!;
    expect(tail.from).toBe(from + 8000);
    expect(Array.from(tail.pcm)).toEqual(Array.from(soFar.subarray(8000)));
    // a copy: the segmenter going on does not change it
    const copy = Array.from(soFar.subarray(-100));
    const later = seg.push(jfk.subarray(pushed, 16000 * 6));
    expect(Array.from(soFar.subarray(-100))).toEqual(copy);
    const utterance = [...later, ...seg.commit()].find((e) => e.kind === "utterance") as { pcm: Int16Array; audioStartMs: number };
    expect(utterance.audioStartMs).toBe(started.audioStartMs);
    expect(Array.from(utterance.pcm.subarray(0, soFar.length))).toEqual(Array.from(soFar));
    expect(seg.openAudio(from)).toBeNull(); // ended
    expect(seg.openTail(from)).toBeNull();
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
  async function segmentTimed(settings: typeof defaultTurnDetection, changeTo?: typeof defaultTurnDetection, input?: Int16Array) {
    const jfk = load("jfk.wav");
    const pcm = input ?? concat(jfk.subarray(0, 16000 * 4), new Int16Array(16000 * 0.6), jfk.subarray(16000 * 4, 16000 * 8), new Int16Array(16000 * 2));
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

  it("given a pause in open speech, pause tells where its silence began and how long it is; endTurn ends the utterance there as enough silence would", async () => {
    const engine = await loadVadEngine();
    const pcm = concat(load("ldc93s1.wav"), new Int16Array(16000));
    // the same audio cut by silence (2 s, so it never does) and by endTurn at 240 ms of pause
    const seg = engine.createSegmenter({ ...defaultTurnDetection, silence_duration_ms: 2000 });
    const events: VadEvent[] = [];
    let ended: { pause: { fromSample: number; samples: number }; at: number } | null = null;
    for (let i = 0; i < pcm.length && !ended; i += 480) {
      events.push(...seg.push(pcm.subarray(i, i + 480)));
      const p = seg.pause;
      if (p) {
        // the silence so far counts whole frames from the last voiced one, up to the audio read
        expect(p.fromSample + p.samples).toBe(seg.position);
        expect(p.samples % 480).toBe(0);
      }
      if (p && p.samples >= 16 * 240 && i > 16000 * 2.5) ended = { pause: p, at: seg.position };
    }
    expect(ended).not.toBeNull();
    const out = seg.endTurn();
    expect(out.map((e) => e.kind)).toEqual(["speech_stopped", "utterance"]);
    const utt = out[1] as Extract<VadEvent, { kind: "utterance" }>;
    // the 200 ms of trailing audio after the last voiced frame, as a silence-ended utterance keeps
    expect(utt.audioEndMs).toBe(Math.round((ended!.pause.fromSample + 16 * VAD_TRAILING_MS) / 16));
    expect(utt.reason).toBe("vad");
    expect(seg.speaking).toBe(false);
    expect(seg.pause).toBeNull();
    expect(seg.endTurn()).toEqual([]);
    seg.close();
  });

  it("given silence_duration_ms shorter than the trailing audio, when speech stops, then the utterance ends where the silence was decided", async () => {
    const stops = vadStops(await segmentTimed({ ...defaultTurnDetection, silence_duration_ms: 120 }));
    expect(stops.length).toBeGreaterThanOrEqual(1);
    for (const s of stops) expect(s.audioEndMs).toBe(s.atMs);
  });

  it("given threshold, when speech begins after silence, then speech_started waits for that fraction of the 10-frame window", async () => {
    const jfk = load("jfk.wav");
    const decided = async (threshold: number) => {
      const timed = await segmentTimed({ ...defaultTurnDetection, threshold, prefix_padding_ms: 0 }, undefined, concat(new Int16Array(16000), jfk));
      const first = timed.find((t) => t.event.kind === "speech_started")!;
      return first.atMs - (first.event as { audioStartMs: number }).audioStartMs;
    };
    // the window's first voiced frame to the end of the frame that crossed the threshold
    expect(await decided(0.1)).toBe(30);
    expect(await decided(1)).toBe(300);
  });

  it("given threshold 1, when speech comes only in bursts shorter than the window, then speech never starts", async () => {
    const jfk = load("jfk.wav");
    const burst = jfk.subarray(16000, 16000 + 480 * 4); // 120 ms of speech
    const parts: Int16Array[] = [new Int16Array(16000)];
    for (let k = 0; k < 12; k++) parts.push(burst, new Int16Array(480 * 7));
    const timed = await segmentTimed({ ...defaultTurnDetection, threshold: 1 }, undefined, concat(...parts));
    expect(timed).toEqual([]);
    // the same bursts do start speech at a threshold they reach
    expect((await segmentTimed({ ...defaultTurnDetection, threshold: 0.3 }, undefined, concat(...parts))).length).toBeGreaterThan(0);
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

describe("VAD segmenter: exact timings, settings and offsets", () => {
  type Utt = Extract<VadEvent, { kind: "utterance" }>;
  const silence = (ms: number) => new Int16Array((ms * 16000) / 1000);
  const utterances = (events: VadEvent[]) => events.filter((e): e is Utt => e.kind === "utterance");
  const samplesOf = (ms: number) => (ms * 16000) / 1000;
  /** The utterance's audio is exactly its time range of the input, sample for sample. */
  const expectAudioOf = (u: Utt, input: Int16Array) => {
    const from = samplesOf(u.audioStartMs);
    expect(u.pcm.length).toBe(samplesOf(u.audioEndMs - u.audioStartMs));
    expect(Buffer.from(u.pcm.buffer, u.pcm.byteOffset, u.pcm.byteLength).equals(Buffer.from(input.buffer, input.byteOffset + from * 2, u.pcm.length * 2))).toBe(true);
  };
  const firstStart = (events: VadEvent[]) => (events.find((e) => e.kind === "speech_started") as Extract<VadEvent, { kind: "speech_started" }>).audioStartMs;

  it("given silence before speech, when prefix_padding_ms grows, then speech starts exactly that much earlier and the utterance holds that audio", async () => {
    const pcm = concat(silence(3000), load("jfk.wav").subarray(0, 16000 * 3), silence(1500));
    for (const threshold of [1, 0.6, 0.1]) {
      const base = await segment(pcm, 1600, { ...defaultTurnDetection, threshold, prefix_padding_ms: 0 });
      const start0 = firstStart(base);
      expect(start0 % 30).toBe(0); // a frame's start
      expect(start0).toBeGreaterThanOrEqual(3000);
      for (const pad of [30, 300, 600, 2000]) {
        const events = await segment(pcm, 1600, { ...defaultTurnDetection, threshold, prefix_padding_ms: pad });
        expect(firstStart(events)).toBe(start0 - pad);
        const [u] = utterances(events);
        expect(u!.audioStartMs).toBe(start0 - pad);
        expectAudioOf(u!, pcm);
      }
    }
  });

  it("given several utterances with pauses, whatever the padding, chunking and offsets, then every utterance holds exactly its range of the input", async () => {
    // long silences between turns (the silent buffer is trimmed and regrown) and a long turn
    // (the speaking buffer grows past the size reserved from the previous utterance)
    const speech = load("silero_test.wav");
    const pcm = concat(silence(2500), speech, silence(4000), load("jfk.wav"), silence(1200), speech.subarray(0, 16000 * 4), silence(900));
    const engine = await loadVadEngine();
    for (const prefix_padding_ms of [0, 300, 1500]) {
      const settings = { ...defaultTurnDetection, prefix_padding_ms };
      let reference: unknown;
      for (const [chunk, byOffset] of [[640, false], [333, false], [4000, true], [333, true]] as const) {
        const seg = engine.createSegmenter(settings);
        const events: VadEvent[] = [];
        for (let off = 0; off < pcm.length; off += chunk) events.push(...seg.push(pcm.subarray(off, off + chunk), byOffset ? off : undefined));
        events.push(...seg.commit("close"));
        seg.close();
        const utts = utterances(events);
        expect(utts.length).toBeGreaterThanOrEqual(4);
        for (const u of utts) expectAudioOf(u, pcm);
        const shape = events.map((e) => (e.kind === "utterance" ? [e.kind, e.audioStartMs, e.audioEndMs, e.reason] : e));
        if (reference === undefined) reference = shape;
        else expect(shape).toEqual(reference);
      }
    }
  });

  it("given a higher threshold, when speech begins, then it starts no sooner than with a lower one", async () => {
    const pcm = concat(silence(3000), load("jfk.wav").subarray(0, 16000 * 3), silence(1500));
    const at = async (threshold: number) => {
      const events = await segment(pcm, 480, { ...defaultTurnDetection, threshold, prefix_padding_ms: 0 });
      return { start: firstStart(events), events };
    };
    const low = await at(0.1);
    const high = await at(1);
    expect(high.start).toBeGreaterThanOrEqual(low.start);
    for (const u of [...utterances(low.events), ...utterances(high.events)]) expectAudioOf(u, pcm);
  });

  it("given max_utterance_ms, when speech runs on, then each cut utterance ends at its quietest 100 ms before the limit and the next starts at the cut", async () => {
    const pcm = concat(silence(1200), load("jfk.wav"), silence(1500));
    for (const max of [1200, 3000]) {
      const events = await segment(pcm, 1600, { ...defaultTurnDetection, max_utterance_ms: max, prefix_padding_ms: 300 });
      const utts = utterances(events);
      const cuts = utts.filter((u) => u.reason === "max_length");
      expect(cuts.length).toBeGreaterThanOrEqual(1);
      for (const u of cuts) {
        // within the last 3 s before the limit (at least 1 s in), at the quietest 100 ms there
        const length = u.audioEndMs - u.audioStartMs;
        expect(length).toBeLessThanOrEqual(max);
        expect(length).toBeGreaterThanOrEqual(Math.min(max, Math.max(1000, max - 3000)) - 60);
        const at = (u.audioEndMs * 16000) / 1000;
        const rms = (from: number) => Math.sqrt(pcm.subarray(from, from + 1600).reduce((a, x) => a + x * x, 0) / 1600);
        const limitAt = ((u.audioStartMs + max) * 16000) / 1000;
        expect(rms(at - 800)).toBeLessThanOrEqual(rms(limitAt - 1600) + 1);
        // speech goes on: a speech_started at the cut comes right after the cut utterance
        expect(events[events.indexOf(u) + 1]).toEqual({ kind: "speech_started", audioStartMs: u.audioEndMs });
        const next = utts[utts.indexOf(u) + 1]!;
        expect(next.audioStartMs).toBe(u.audioEndMs);
      }
      for (const u of utts) {
        expect(u.audioEndMs - u.audioStartMs).toBeLessThanOrEqual(max);
        expectAudioOf(u, pcm);
      }
    }
  });

  /** Feeds `pcm` in chunks with their offsets, each chunk `deliver`ed as given. */
  async function segmentOffsets(pcm: Int16Array, chunk: number, deliver: (seg: ReturnType<Awaited<ReturnType<typeof loadVadEngine>>["createSegmenter"]>, sub: Int16Array, off: number) => VadEvent[], skip?: [number, number]) {
    const engine = await loadVadEngine();
    const seg = engine.createSegmenter(defaultTurnDetection);
    const events: VadEvent[] = [];
    for (let off = 0; off < pcm.length; off += chunk) {
      if (skip && off >= skip[0] && off < skip[1]) continue;
      events.push(...deliver(seg, pcm.subarray(off, off + chunk), off));
    }
    events.push(...seg.commit("close"));
    seg.close();
    return events;
  }
  const summary = (events: VadEvent[]) => events.map((e) => (e.kind === "utterance" ? [e.kind, e.audioStartMs, e.audioEndMs, e.reason] : e));

  it("given redeliveries overlapping new audio, when pushed by offset, then only the new samples count and the segmentation is as if sent once", async () => {
    const pcm = concat(silence(900), load("jfk.wav"), silence(1500));
    const once = await segmentOffsets(pcm, 1000, (seg, sub, off) => seg.push(sub, off));
    // each chunk comes again together with the next one's first 700 samples... and the previous 300
    const overlapping = await segmentOffsets(pcm, 1000, (seg, _sub, off) => {
      const from = Math.max(0, off - 300);
      return seg.push(pcm.subarray(from, off + 1000), from);
    });
    expect(summary(overlapping)).toEqual(summary(once));
    for (const u of utterances(overlapping)) expectAudioOf(u, pcm);
  });

  it("given a gap in the timeline while silent, when audio resumes at a later offset, then events and audio sit at the true positions", async () => {
    const pcm = concat(silence(3000), load("jfk.wav"), silence(1500));
    // 1 s of the silence never arrives (at an offset that is not a frame boundary)
    const gapped = await segmentOffsets(pcm, 1000, (seg, sub, off) => seg.push(sub, off), [8000, 24000]);
    const whole = await segmentOffsets(pcm, 1000, (seg, sub, off) => seg.push(sub, off));
    expect(utterances(gapped).length).toBeGreaterThanOrEqual(1);
    for (const u of utterances(gapped)) expectAudioOf(u, pcm);
    expect(summary(gapped)).toEqual(summary(whole));
  });

  it("given a commit in the middle of a frame, when committed, then the utterance ends at the last sample sent and later audio keeps its positions", async () => {
    const jfk = load("jfk.wav");
    const pcm = concat(silence(600), jfk, silence(1500));
    const engine = await loadVadEngine();
    const seg = engine.createSegmenter(defaultTurnDetection);
    const cutAt = 16000 * 3 + 160; // 10 ms into a frame
    const events = [...seg.push(pcm.subarray(0, cutAt))];
    expect(seg.speaking).toBe(true);
    events.push(...seg.commit());
    const committed = utterances(events)[0]!;
    expect(committed.reason).toBe("commit");
    expect(committed.audioEndMs).toBe(3010);
    expectAudioOf(committed, pcm);
    for (let i = cutAt; i < pcm.length; i += 1000) events.push(...seg.push(pcm.subarray(i, i + 1000)));
    events.push(...seg.commit("close"));
    seg.close();
    const later = utterances(events).slice(1);
    expect(later.length).toBeGreaterThanOrEqual(1);
    for (const u of later) {
      expect(u.audioStartMs).toBeGreaterThanOrEqual(3010);
      expectAudioOf(u, pcm);
    }
  });
  it("manual: silence and speech alike are one open item until the commit, then the next starts at once", async () => {
    const engine = await loadVadEngine();
    const seg = engine.createSegmenter({ ...defaultTurnDetection, type: "manual", prefix_padding_ms: 0 });
    const pcm = concat(new Int16Array(16000 * 2), load("jfk.wav").subarray(0, 16000), new Int16Array(16000 * 2));
    const pushed: VadEvent[] = [];
    for (let i = 0; i < pcm.length; i += 640) pushed.push(...seg.push(pcm.subarray(i, i + 640)));
    expect(pushed.map((e) => e.kind)).toEqual(["speech_started"]);
    const committed = seg.commit("commit");
    const utt = committed.find((e) => e.kind === "utterance");
    expect(utt).toMatchObject({ audioStartMs: 0, audioEndMs: 5000, reason: "commit" });
    expect(seg.push(new Int16Array(960)).map((e) => e.kind)).toEqual(["speech_started"]);
    seg.close();
  });
});
