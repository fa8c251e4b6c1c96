import { z } from "zod";
import { AppError } from "../../shared/errors";
import { getJson, putJson, type ObjectStore } from "../../shared/objects/index";
import {
  artifactKeys,
  jobResult,
  reviewChunkArtifact,
  type JobResult,
  type JobSegment,
  type ReviewChunkArtifact,
  type ReviewedResult,
} from "../../schemas/jobs";
import type { ActiveJob } from "../../domain/jobs/decider";
import { annotationsFrom, checkCandidates, type Aligner, type SliceAudio } from "./review-acoustic";
import { applyToText, confidentAnnotations, loadPronouncer, vocabularyOf } from "./review-embedded";
import { toPcm } from "./slice-audio";
import { channelViews } from "./aggregate";
import { pickChannel } from "../../shared/audio/channels";
import { correctedText, transcriptPipeline } from "../../domain/transcript/pipeline";

/**
 * The two-stage review (`review: true`), by one of two reviewers behind one interface:
 * the LLM reviewer when REVIEW_LLM_URL is set, else the embedded reviewer
 * (review-embedded.ts: vocabulary from `metadata` and `prompt`, phonetic matching;
 * review-acoustic.ts: each match checked against the slice's audio).
 *
 * 1. Per slice (`review_chunk_{i}`): the slice's segments plus the job's `metadata`
 *    (e.g. medical_specialty, speaker_roles, known_medications) go to the reviewer,
 *    which answers `{corrections: [{segment_id, text, reason}], notes}` (the embedded
 *    one adds its `annotations`). Stored as `review_chunk_{i}.json`.
 * 2. Final (`review`): the whole transcript with every slice's artifact goes to the
 *    reviewer once more, which answers `{segments: [{id, text}], notes}`: the corrected
 *    text of every segment it changes. Times never change. Stored as
 *    `reviewed_result.json`.
 *
 * An LLM answer that is not the expected JSON is a retryable failure (models are
 * flaky); after the step's attempts the job fails with `review_failed`, result.json
 * intact.
 */
export interface SliceReviewInput {
  metadata: Record<string, unknown>;
  prompt?: string;
  /** The job's `keyterms`: vocabulary, as metadata's strings are. */
  keyterms?: string[];
  language: string;
  slice: { index: number; start_time: number; end_time: number };
  segments: JobSegment[];
  /** The slice's audio, read only by a reviewer that listens (the embedded one). */
  audio?: () => Promise<SliceAudio | undefined>;
}
interface TranscriptReviewInput {
  metadata: Record<string, unknown>;
  prompt?: string;
  language: string;
  segments: JobSegment[];
  slices: ReviewChunkArtifact[];
}
type SliceReview = Pick<ReviewChunkArtifact, "corrections" | "annotations" | "notes">;

export interface Reviewer {
  kind: "embedded" | "llm";
  /** "embedded" or the LLM's model name, recorded in every review artifact. */
  model: string;
  reviewSlice(input: SliceReviewInput, signal?: AbortSignal): Promise<SliceReview>;
  reviewTranscript(input: TranscriptReviewInput, signal?: AbortSignal): Promise<{ segments: { id: number; text: string }[]; notes: string }>;
}

export interface ReviewLlm {
  url: string;
  apiKey?: string;
  model: string;
  timeoutMs?: number;
}

const chatResponse = z.object({
  choices: z.array(z.object({ message: z.object({ content: z.string().nullable() }) })).min(1),
});

const stage1Answer = z.object({
  corrections: z.array(z.object({ segment_id: z.number().int(), text: z.string(), reason: z.string().optional() })).default([]),
  notes: z.string().default(""),
});
const stage2Answer = z.object({
  segments: z.array(z.object({ id: z.number().int(), text: z.string() })).default([]),
  notes: z.string().default(""),
});

function chatCompletionsUrl(base: string): string {
  const trimmed = base.replace(/\/+$/, "");
  return trimmed.endsWith("/chat/completions") ? trimmed : `${trimmed}/chat/completions`;
}

async function askJson<T>(llm: ReviewLlm, system: string, user: unknown, schema: z.ZodType<T>, signal?: AbortSignal): Promise<T> {
  // A timer, not AbortSignal.any([AbortSignal.timeout(…), signal]): the composite holds its
  // sources weakly and the timeout can be garbage-collected before it fires (Node 20).
  const controller = new AbortController();
  // Not cleared: like AbortSignal.timeout it also bounds reading the body below.
  const timer = setTimeout(() => controller.abort(new DOMException("The operation was aborted due to timeout", "TimeoutError")), llm.timeoutMs ?? 120_000);
  timer.unref();
  const onAbort = () => controller.abort(signal!.reason);
  if (signal?.aborted) onAbort();
  else signal?.addEventListener("abort", onAbort, { once: true });
  let res: Response;
  try {
    res = await fetch(chatCompletionsUrl(llm.url), {
      method: "POST",
      headers: { "content-type": "application/json", ...(llm.apiKey ? { authorization: `Bearer ${llm.apiKey}` } : {}) },
      body: JSON.stringify({
        model: llm.model,
        temperature: 0,
        response_format: { type: "json_object" },
        messages: [
          { role: "system", content: system },
          { role: "user", content: JSON.stringify(user) },
        ],
      }),
      signal: controller.signal,
    });
  } catch (err) {
    throw new AppError("upstream", "review_failed", "the review model could not be reached", { cause: err });
  }
  if (!res.ok) {
    throw new AppError("upstream", "review_failed", `the review model answered ${res.status}`, { retryable: res.status >= 500 || res.status === 429 });
  }
  const body = chatResponse.safeParse(await res.json().catch(() => undefined));
  const content = body.success ? body.data.choices[0]!.message.content : null;
  let parsed: unknown;
  try {
    parsed = JSON.parse((content ?? "").replace(/^```(?:json)?\s*|\s*```$/g, ""));
  } catch {
    throw new AppError("upstream", "review_failed", "the review model did not answer with JSON");
  }
  const checked = schema.safeParse(parsed);
  if (!checked.success) throw new AppError("upstream", "review_failed", "the review model's answer has the wrong shape");
  return checked.data;
}

const STAGE1_SYSTEM =
  "You review the output of an automatic speech recognizer, one slice of a recording at a time. " +
  "Find words that were probably misrecognized (names, terms, drugs, numbers) using the context given in `metadata`. " +
  'Answer only JSON: {"corrections":[{"segment_id":<id>,"text":"<corrected full segment text>","reason":"<short>"}],"notes":"<short>"}. ' +
  "Only list segments you would change. Never invent speech that is not there.";

const STAGE2_SYSTEM =
  "You produce the final corrected transcript of a recording from its automatic transcript and per-slice review notes. " +
  "Accept, adjust or reject each proposed correction for consistency across the whole recording, using `metadata` as context. " +
  'Answer only JSON: {"segments":[{"id":<id>,"text":"<final text>"}],"notes":"<short>"} listing only segments whose text changes.';

/** The LLM reviewer: both stages as chat completions in JSON mode. */
export function llmReviewer(llm: ReviewLlm): Reviewer {
  return {
    kind: "llm",
    model: llm.model,
    async reviewSlice(input, signal) {
      if (input.segments.length === 0) return { corrections: [], notes: "no speech in this slice" };
      const answer = await askJson(
        llm,
        STAGE1_SYSTEM,
        {
          metadata: input.metadata,
          // the words the caller named: the likeliest spellings of a misrecognised name or term
          ...(input.keyterms?.length ? { keyterms: input.keyterms } : {}),
          language: input.language,
          slice: input.slice,
          segments: input.segments.map((s) => ({ segment_id: s.id, start_time: s.start_time, end_time: s.end_time, ...speakerOf(s), text: s.text })),
        },
        stage1Answer,
        signal,
      );
      return { corrections: answer.corrections, notes: answer.notes };
    },
    reviewTranscript(input, signal) {
      return askJson(
        llm,
        STAGE2_SYSTEM,
        {
          metadata: input.metadata,
          language: input.language,
          segments: input.segments.map((s) => ({ id: s.id, start_time: s.start_time, end_time: s.end_time, ...speakerOf(s), text: s.text })),
          proposed_corrections: input.slices.flatMap((a) => a.corrections),
          slice_notes: input.slices.map((a) => a.notes).filter(Boolean),
        },
        stage2Answer,
        signal,
      );
    },
  };
}

/**
 * The embedded reviewer (no model needed): stage 1 annotates the slice's spans that
 * sound like a term of the job's vocabulary and checks each against the slice's audio
 * with `aligner` (the embedded engine's acoustic model); stage 2 applies the confident
 * ones. Without an aligner or audio nothing is confident, so nothing changes.
 */
export const embeddedReviewer = (aligner?: Aligner): Reviewer => ({
  kind: "embedded",
  model: "embedded",
  async reviewSlice(input) {
    const vocabulary = vocabularyOf(input.metadata, input.prompt, input.keyterms);
    let annotations: NonNullable<SliceReview["annotations"]> = [];
    let candidates = 0;
    let checked = 0;
    if (vocabulary.length && input.segments.length) {
      const evidence = await checkCandidates(input.segments, vocabulary, await loadPronouncer(), input.audio ?? (async () => undefined), aligner);
      candidates = evidence.length;
      checked = evidence.filter((e) => e.gain !== undefined).length;
      annotations = annotationsFrom(evidence);
    }
    const confident = confidentAnnotations(annotations);
    const corrections = input.segments.flatMap((s) => {
      const mine = confident.filter((a) => a.segment_id === s.id);
      return mine.length ? [{ segment_id: s.id, text: applyToText(s.text, mine), reason: mine.map((a) => a.reason).join("; ") }] : [];
    });
    const notes =
      vocabulary.length === 0
        ? "no vocabulary in metadata, prompt or keyterms"
        : `${vocabulary.length} vocabulary terms; ${candidates} candidate spans, ${checked} checked against the audio, ${confident.length} confident`;
    return { corrections, annotations, notes };
  },
  async reviewTranscript(input) {
    const bySegment = new Map<number, NonNullable<SliceReview["annotations"]>>();
    for (const a of confidentAnnotations(input.slices.flatMap((s) => s.annotations ?? []))) {
      bySegment.set(a.segment_id, [...(bySegment.get(a.segment_id) ?? []), a]);
    }
    const segments = input.segments.flatMap((s) => {
      const mine = bySegment.get(s.id);
      return mine ? [{ id: s.id, text: applyToText(s.text, mine) }] : [];
    });
    const applied = [...bySegment.values()].reduce((n, a) => n + a.length, 0);
    return { segments, notes: `embedded reviewer: ${applied} confident corrections applied` };
  },
});

async function loadResult(job: ActiveJob, objects: ObjectStore): Promise<JobResult> {
  const parsed = jobResult.safeParse(await getJson(objects, artifactKeys.result(job.spec)));
  if (!parsed.success) throw new AppError("unavailable", "checkpoint_missing", "result.json is missing or unreadable");
  return parsed.data;
}

/** Stage 1 for slice `index`; reuses a stored review_chunk_{i}.json. */
export async function reviewChunk(job: ActiveJob, index: number, objects: ObjectStore, reviewer: Reviewer, now: () => Date, signal?: AbortSignal): Promise<ReviewChunkArtifact> {
  const key = artifactKeys.reviewChunk(job.spec, index);
  const stored = reviewChunkArtifact.safeParse(await getJson(objects, key).catch(() => undefined));
  if (stored.success) return stored.data;
  const result = await loadResult(job, objects);
  const chunk = job.chunks?.[index];
  const rate = job.audio?.sampleRate ?? 16_000;
  if (!chunk) throw new AppError("internal", "chunk_missing", `chunk ${index} is not planned`);
  const from = chunk.startSample / rate;
  const to = chunk.endSample / rate;
  // multichannel: the slice's own channel's segments, and its own channel's audio
  const segments = result.segments.filter((s) => s.start_time >= from - 1e-6 && s.start_time < to && s.channel === chunk.channel);
  const channels = job.audio?.channels ?? 1;
  const answer = await reviewer.reviewSlice(
    {
      metadata: job.spec.metadata ?? {},
      prompt: job.spec.prompt,
      keyterms: job.spec.keyterms,
      language: result.metadata.language,
      slice: { index, start_time: from, end_time: to },
      segments,
      audio: async () => {
        const bytes = job.audio && (await objects.getRange(job.audio.audioKey, chunk.startSample * 2 * channels, chunk.endSample * 2 * channels));
        return bytes ? { pcm: pickChannel(toPcm(bytes), channels, chunk.channel ?? 0), startTime: from } : undefined;
      },
    },
    signal,
  );
  const byId = new Map(segments.map((s) => [s.id, s.text]));
  const guard = redactionOf(job);
  const corrections = answer.corrections.flatMap((c) => {
    const original = byId.get(c.segment_id);
    const text = original === undefined ? undefined : correctedText(guard, original, c.text);
    return text === undefined ? [] : [{ ...c, text }];
  });
  const ids = new Set(byId.keys());
  const artifact: ReviewChunkArtifact = {
    index,
    model: reviewer.model,
    corrections,
    ...(answer.annotations ? { annotations: answer.annotations.filter((a) => ids.has(a.segment_id)) } : {}),
    notes: answer.notes,
    reviewed_at: now().toISOString(),
  };
  await putJson(objects, key, artifact);
  return artifact;
}

/** The job's redaction alone (no formatting), to hold a reviewer's corrections to it. */
const redactionOf = (job: ActiveJob) => transcriptPipeline({ smartFormat: false, redact: job.spec.redact, metadata: job.spec.metadata, prompt: job.spec.prompt, keyterms: job.spec.keyterms });

/** Stage 2: the final corrected transcript, written to reviewed_result.json. */
export async function reviewTranscript(job: ActiveJob, objects: ObjectStore, reviewer: Reviewer, now: () => Date, signal?: AbortSignal): Promise<ReviewedResult> {
  const result = await loadResult(job, objects);
  const slices: ReviewChunkArtifact[] = [];
  for (const chunk of job.chunks ?? []) {
    const parsed = reviewChunkArtifact.safeParse(await getJson(objects, artifactKeys.reviewChunk(job.spec, chunk.index)));
    if (!parsed.success) throw new AppError("unavailable", "checkpoint_missing", `review_chunk_${chunk.index}.json is missing`);
    slices.push(parsed.data);
  }
  const answer = await reviewer.reviewTranscript(
    { metadata: job.spec.metadata ?? {}, prompt: job.spec.prompt, language: result.metadata.language, segments: result.segments, slices },
    signal,
  );
  const corrected = new Map(answer.segments.map((s) => [s.id, s.text.trim()]));
  const guard = redactionOf(job);
  let changed = 0;
  const segments = result.segments.map((s) => {
    const given = corrected.get(s.id);
    const text = given === undefined ? undefined : correctedText(guard, s.text, given);
    if (text === undefined || text === "" || text === s.text) return s;
    changed++;
    return { ...s, text };
  });
  const reviewed: ReviewedResult = {
    ...result,
    text: segments.map((s) => s.text).join(" "),
    segments,
    ...(result.channels ? { channels: channelViews(segments, result.channels.length) } : {}),
    review: { reviewer: reviewer.kind, model: reviewer.model, corrected_segments: changed, notes: answer.notes, reviewed_at: now().toISOString() },
  };
  await putJson(objects, artifactKeys.reviewed(job.spec), reviewed);
  return reviewed;
}

/** With `diarize`: who spoke the segment (its role where `metadata.speaker_roles` names it), for the reviewer to read. */
const speakerOf = (s: JobSegment) => ({
  ...(s.speaker !== undefined ? { speaker: s.speaker } : {}),
  ...(s.speaker_role !== undefined ? { speaker_role: s.speaker_role } : {}),
});
