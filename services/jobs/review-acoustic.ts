import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { killWithUs } from "../../shared/process-guard";
import { createInterface } from "node:readline";
import { z } from "zod";
import { ensurePocketsphinxBinary } from "../../shared/pocketsphinx/build";
import { APPLY_CONFIDENCE, candidateSpans, normalizeWord, resolveOverlaps, type Annotation, type Pronounce, type ReviewSegment, type VocabularyTerm } from "./review-embedded";

/**
 * The embedded reviewer's acoustic check. Text alone cannot tell a span the engine
 * misheard ("until this blows" for "ill disposed") from one it heard right that merely
 * sounds a little like a term ("married a more" ~ Marianne): the audio can. Each
 * candidate's segment is force-aligned twice by the embedded engine's acoustic model
 * (ps-worker's alignment request, no language model involved): once with the words
 * as transcribed, once with the span replaced by the term. The difference of the two
 * acoustic log-likelihoods over the same frames says which the audio supports; the
 * recognizer chose the original partly for its language model, so a term that was
 * really said often fits the sound better than what was written.
 *
 * The ps-worker binary is the embedded engine's (services/transcriber/pocketsphinx):
 * the reviewer runs its own process of it, started on the first check and stopped
 * when idle, so the jobs-reviewer needs no transcription worker to be reachable.
 */

interface AlignRequest {
  fromSample: number;
  toSample: number;
  words: string[];
}

interface Alignment {
  /** Acoustic score of the forced path: a log-likelihood in the decoder's scaled units (log base 1.0001). */
  ascr: number;
  frames: number;
  /** Each word with its start and end frame (100 frames a second) from `fromSample`. */
  words: [string, number, number][];
}

export interface Aligner {
  /**
   * Force-aligns each request's words to its sample range of `pcm` (16 kHz, a whole
   * slice: its cepstral mean is taken from all of it). `pronunciations` supplies
   * phonemes for words the engine's dictionary may lack. null: not alignable.
   */
  align(pcm: Int16Array, requests: AlignRequest[], pronunciations: Map<string, string[]>): Promise<(Alignment | null)[]>;
  close(): Promise<void>;
}

const MAGIC_ALIGN = 0x33535350;
const alignResponse = z.union([
  z.object({
    alignments: z.array(z.object({ ascr: z.number(), frames: z.number(), words: z.array(z.tuple([z.string(), z.number(), z.number()])) }).nullable()),
  }),
  z.object({ error: z.string() }),
]);

export interface AlignerOptions {
  binary?: string;
  modelDir?: string;
  /** The process exits after this long without a request (default 60 s). */
  idleMs?: number;
  /** A request not answered in this long kills the process and fails (default 120 s). */
  timeoutMs?: number;
}

/**
 * One ps-worker process serving alignment requests one at a time, started on first
 * use and again after it exits (idle, or crashed: the request it held fails).
 */
export function createAligner(options: AlignerOptions = {}): Aligner {
  const modelDir = options.modelDir ?? "/usr/share/pocketsphinx/model/en-us";
  let proc: Promise<{ child: ChildProcessWithoutNullStreams; next: () => Promise<string> }> | undefined;
  let tail: Promise<unknown> = Promise.resolve();
  let idle: NodeJS.Timeout | undefined;
  let live: ChildProcessWithoutNullStreams | undefined;

  const start = async () => {
    const binary = options.binary ?? (await ensurePocketsphinxBinary());
    const child = spawn(binary, [modelDir, "--align-only"], { stdio: ["pipe", "pipe", "pipe"] });
    killWithUs(child);
    live = child;
    child.stderr.resume();
    child.stdin.on("error", () => undefined);
    const waiting: { resolve: (line: string) => void; reject: (e: Error) => void }[] = [];
    const lines = createInterface({ input: child.stdout });
    lines.on("line", (line) => waiting.shift()?.resolve(line));
    // A process that exits, or never starts (spawn "error", after which "exit" may not
    // come), fails what waits on it and frees its slot for the next request.
    let dead: string | undefined;
    const gone = (why: string) => {
      dead = why;
      if (live === child) (proc = undefined), (live = undefined);
      for (const w of waiting.splice(0)) w.reject(new Error(why));
    };
    child.once("exit", () => gone("ps-worker exited"));
    child.once("error", (err) => gone(`ps-worker failed: ${err.message}`));
    const next = () => new Promise<string>((resolve, reject) => (dead ? reject(new Error(dead)) : waiting.push({ resolve, reject })));
    const ready = await next();
    if (!ready.includes('"ready":true')) throw new Error(`ps-worker failed to start: ${ready}`);
    return { child, next };
  };

  const stop = async () => {
    const p = proc;
    proc = undefined;
    live = undefined;
    const running = await p?.catch(() => undefined);
    if (!running || running.child.exitCode !== null || running.child.signalCode !== null) return;
    await new Promise<void>((done) => {
      running.child.once("exit", () => done());
      running.child.stdin.end();
      setTimeout(() => running.child.kill("SIGKILL"), 2000).unref();
    });
  };

  const run = async (pcm: Int16Array, requests: AlignRequest[], pronunciations: Map<string, string[]>) => {
    clearTimeout(idle);
    if (!proc) {
      const starting = start();
      proc = starting;
      starting.catch(() => proc === starting && (proc = undefined));
    }
    const { child, next } = await proc;
    const text = [
      ...[...pronunciations].filter(([w, p]) => /^[a-z']+$/.test(w) && p.length).map(([w, p]) => `word ${w} ${p.join(" ")}`),
      ...requests.map((r) => `align ${Math.round(r.fromSample)} ${Math.round(r.toSample)} ${r.words.join(" ")}`),
    ].join("\n");
    const textBytes = Buffer.from(text, "utf8");
    const head = Buffer.alloc(12);
    head.writeUInt32LE(MAGIC_ALIGN, 0);
    head.writeUInt32LE(pcm.length, 4);
    head.writeUInt32LE(textBytes.length, 8);
    const answer = next();
    child.stdin.write(head);
    child.stdin.write(textBytes);
    child.stdin.write(Buffer.from(pcm.buffer, pcm.byteOffset, pcm.byteLength));
    const timer = setTimeout(() => child.kill("SIGKILL"), options.timeoutMs ?? 120_000);
    const line = await answer.finally(() => clearTimeout(timer));
    const parsed = alignResponse.parse(JSON.parse(line));
    idle = setTimeout(() => void stop(), options.idleMs ?? 60_000);
    idle.unref();
    if ("error" in parsed) throw new Error(`ps-worker: ${parsed.error}`);
    return parsed.alignments.map((a) => a && { ascr: a.ascr, frames: a.frames, words: a.words });
  };

  return {
    align(pcm, requests, pronunciations) {
      if (requests.length === 0) return Promise.resolve([]);
      const result = tail.then(() => run(pcm, requests, pronunciations));
      tail = result.catch(() => undefined);
      return result;
    },
    async close() {
      clearTimeout(idle);
      await tail;
      await stop();
    },
  };
}

// ---------------------------------------------------------------- the check

export interface TimedSegment extends ReviewSegment {
  start_time: number;
  end_time: number;
}

/** A slice's audio: 16 kHz PCM starting at `startTime` seconds of the job's audio. */
export interface SliceAudio {
  pcm: Int16Array;
  startTime: number;
}

export interface AcousticEvidence {
  annotation: Annotation;
  /** Acoustic score of the segment with the term minus with the words as transcribed (decoder units); undefined: not checked. */
  gain?: number;
}

const SAMPLE_RATE = 16_000;
/** Audio taken on each side of a segment: engines place segment edges on the words' edges. */
const MARGIN_SECONDS = 0.15;

/** A segment word as the aligner's tokens: lower case, hyphenated parts apart; undefined if it has digits or nothing left. */
function tokensOf(raw: string): string[] | undefined {
  if (/\d/.test(raw)) return undefined;
  const parts = raw.split(/[-‐–—]+/).map(normalizeWord).filter(Boolean);
  return parts.length ? parts : undefined;
}

/**
 * For each candidate, how much better the audio fits its segment with the term than
 * with the words as transcribed. A candidate whose segment has a word the aligner
 * cannot take (a formatted number) or a term without pronunciation stays unchecked.
 */
async function acousticEvidence(
  candidates: Annotation[],
  segments: TimedSegment[],
  audio: SliceAudio,
  aligner: Aligner,
  pronounce: Pronounce,
): Promise<AcousticEvidence[]> {
  const requests: AlignRequest[] = [];
  const pronunciations = new Map<string, string[]>();
  const addTokens = (tokens: string[]) => {
    for (const t of tokens) {
      const p = pronounce(t)?.[0];
      if (p) pronunciations.set(t, p);
    }
  };
  const bySegment = new Map(segments.map((s) => [s.id, s]));
  const baseIndex = new Map<number, number>();
  const plan: { annotation: Annotation; base?: number; alt?: number }[] = [];
  for (const annotation of candidates) {
    const segment = bySegment.get(annotation.segment_id);
    const words = segment?.text.split(/\s+/).filter(Boolean) ?? [];
    const tokens = words.map(tokensOf);
    const term = annotation.suggestion.split(/\s+/).map(tokensOf);
    if (!segment || tokens.some((t) => !t) || term.some((t) => !t) || annotation.end_word > words.length) {
      plan.push({ annotation });
      continue;
    }
    const from = Math.max(0, (segment.start_time - audio.startTime - MARGIN_SECONDS) * SAMPLE_RATE);
    const to = Math.min(audio.pcm.length, (segment.end_time - audio.startTime + MARGIN_SECONDS) * SAMPLE_RATE);
    const original = tokens.flatMap((t) => t!);
    const replaced = [...tokens.slice(0, annotation.start_word), ...term, ...tokens.slice(annotation.end_word)].flatMap((t) => t!);
    addTokens(replaced);
    addTokens(original);
    if (!baseIndex.has(segment.id)) {
      baseIndex.set(segment.id, requests.length);
      requests.push({ fromSample: from, toSample: to, words: original });
    }
    plan.push({ annotation, base: baseIndex.get(segment.id)!, alt: requests.length });
    requests.push({ fromSample: from, toSample: to, words: replaced });
  }
  const alignments = await aligner.align(audio.pcm, requests, pronunciations);
  return plan.map(({ annotation, base, alt }) => {
    const b = base === undefined ? null : alignments[base];
    const a = alt === undefined ? null : alignments[alt];
    return !b || !a ? { annotation } : { annotation, gain: a.ascr - b.ascr };
  });
}

// ---------------------------------------------------------------- the decision

/** Spans from this sound similarity up are checked against the audio. */
const CANDIDATE_SOUND = 0.6;
/** At most this many candidates a slice are checked (best sound first): bounds the aligner's work. */
const MAX_CHECKED = 60;
/**
 * A term is applied when its segment's acoustic score with the term is at least this
 * much above (here: at most this much below) the score with the words as transcribed,
 * in the decoder's scaled log units. Below zero on purpose: the job names the term,
 * so a term fitting about as well as what the recognizer wrote is taken; measured
 * (test/jobs-review-embedded-eval.test.ts, docs/jobs.md), spans that were right and
 * only sounded somewhat like a term lose 400 and more, misheard terms lose at most
 * about 90. Not robust to larger vocabularies: with 18–20 more distractors per clip
 * three wrong terms pass (a near-homophone, "still" → Steele, at −206; a wrong reading
 * of a span already wrong at +117); nothing wrong there needs about +200 (docs/jobs.md).
 */
export const APPLY_GAIN = -250;
/** How fast confidence moves with the gain: 0.8 at APPLY_GAIN, 0.97 at +400 from it, 0.35 at −400. */
const GAIN_SCALE = 200;
/** Annotations recorded in review_chunk_{i}.json from this confidence up. */
const RECORD_CONFIDENCE = 0.3;

const round2 = (x: number) => Math.round(x * 100) / 100;

/**
 * Evidence → annotations: confidence from the acoustic gain (APPLY_CONFIDENCE, 0.8,
 * exactly at `applyGain`, and rounded so that it stays on its side of it), the reason
 * naming both the sound and the audio's verdict.
 * An unchecked candidate gets half its sound similarity, so it is never applied.
 * Overlapping ones resolved best first; those from RECORD_CONFIDENCE up kept.
 */
export function annotationsFrom(evidence: AcousticEvidence[], applyGain = APPLY_GAIN): Annotation[] {
  const annotations = evidence.map(({ annotation: a, gain }) => {
    if (gain === undefined) return { ...a, sound: a.confidence, confidence: a.confidence / 2, reason: `${a.reason}; not checked against the audio` };
    const confidence = 1 / (1 + ((1 - APPLY_CONFIDENCE) / APPLY_CONFIDENCE) * Math.exp(-(gain - applyGain) / GAIN_SCALE));
    const verdict = gain >= 0 ? `better than "${a.original}" by ${Math.round(gain)}` : `${Math.round(-gain)} worse than "${a.original}"`;
    return { ...a, sound: a.confidence, confidence, reason: `${a.reason}; the audio fits "${a.suggestion}" ${verdict} (acoustic score)` };
  });
  // Best first by the exact confidence (the gain's order), then by sound: "john guess
  // would" → "John Dashwood" and "guess would" → "Dashwood" align the same words.
  const rank = (a: (typeof annotations)[number], b: (typeof annotations)[number]) =>
    b.confidence - a.confidence || b.sound - a.sound || a.end_word - a.start_word - (b.end_word - b.start_word);
  return resolveOverlaps(annotations, rank)
    .filter((a) => a.confidence >= RECORD_CONFIDENCE)
    .map(({ sound: _sound, ...a }) => ({ ...a, confidence: a.confidence >= APPLY_CONFIDENCE ? Math.max(APPLY_CONFIDENCE, Math.floor(a.confidence * 100) / 100) : Math.min(APPLY_CONFIDENCE - 0.01, round2(a.confidence)) }));
}

/**
 * Stage 1 of the embedded reviewer for one slice: the spans that sound like a term
 * (CANDIDATE_SOUND up, the MAX_CHECKED best), each checked against the slice's audio
 * (read only when there is a candidate). Without audio or an aligner that runs, every
 * candidate stays unchecked, and so below the apply threshold.
 */
export async function checkCandidates(
  segments: TimedSegment[],
  vocabulary: VocabularyTerm[],
  pronounce: Pronounce,
  audio: () => Promise<SliceAudio | undefined>,
  aligner: Aligner | undefined,
): Promise<AcousticEvidence[]> {
  const candidates = candidateSpans(segments, vocabulary, pronounce, CANDIDATE_SOUND)
    .sort((a, b) => b.confidence - a.confidence)
    .slice(0, MAX_CHECKED);
  const unchecked = () => candidates.map((annotation) => ({ annotation }));
  if (!aligner || candidates.length === 0) return unchecked();
  const pcm = await audio();
  if (!pcm) return unchecked();
  // An aligner that cannot run (no engine installed, a crash) leaves every candidate unchecked.
  return acousticEvidence(candidates, segments, pcm, aligner, pronounce).catch(unchecked);
}
