import { z } from "zod";
import { AppError } from "../../shared/errors";
import { getJson, putJson, type ObjectStore } from "../../shared/objects/index";
import {
  artifactKeys,
  jobResult,
  reviewChunkArtifact,
  type JobResult,
  type ReviewChunkArtifact,
  type ReviewedResult,
} from "../../schemas/jobs";
import type { ActiveJob } from "./job";

/**
 * The two-stage language-model review (`review: true`), against any OpenAI-compatible
 * chat-completions endpoint (REVIEW_LLM_URL).
 *
 * 1. Per slice (`review_chunk_{i}`): the slice's segments plus the job's `metadata`
 *    (e.g. medical_specialty, speaker_roles, known_medications) go to the model, which
 *    answers JSON `{corrections: [{segment_id, text, reason}], notes}`. Stored as
 *    `review_chunk_{i}.json`.
 * 2. Final (`review`): the whole transcript with every slice's proposed corrections
 *    goes to the model once more, which answers `{segments: [{id, text}], notes}`: the
 *    corrected text of every segment it changes. Times never change. Stored as
 *    `reviewed_result.json`.
 *
 * A model answer that is not the expected JSON is a retryable failure (models are
 * flaky); after the step's attempts the job fails with `review_failed`.
 */
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

export function chatCompletionsUrl(base: string): string {
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

async function loadResult(job: ActiveJob, objects: ObjectStore): Promise<JobResult> {
  const parsed = jobResult.safeParse(await getJson(objects, artifactKeys.result(job.spec)));
  if (!parsed.success) throw new AppError("unavailable", "checkpoint_missing", "result.json is missing or unreadable");
  return parsed.data;
}

/** Stage 1 for slice `index`; reuses a stored review_chunk_{i}.json. */
export async function reviewChunk(job: ActiveJob, index: number, objects: ObjectStore, llm: ReviewLlm, now: () => Date, signal?: AbortSignal): Promise<ReviewChunkArtifact> {
  const key = artifactKeys.reviewChunk(job.spec, index);
  const stored = reviewChunkArtifact.safeParse(await getJson(objects, key).catch(() => undefined));
  if (stored.success) return stored.data;
  const result = await loadResult(job, objects);
  const chunk = job.chunks?.[index];
  const rate = job.audio?.sampleRate ?? 16_000;
  if (!chunk) throw new AppError("internal", "chunk_missing", `chunk ${index} is not planned`);
  const from = chunk.startSample / rate;
  const to = chunk.endSample / rate;
  const segments = result.segments.filter((s) => s.start_time >= from - 1e-6 && s.start_time < to);
  let answer: z.infer<typeof stage1Answer> = { corrections: [], notes: "no speech in this slice" };
  if (segments.length > 0) {
    answer = await askJson(
      llm,
      STAGE1_SYSTEM,
      {
        metadata: job.spec.metadata ?? {},
        language: result.metadata.language,
        slice: { index, start_time: from, end_time: to },
        segments: segments.map((s) => ({ segment_id: s.id, start_time: s.start_time, end_time: s.end_time, text: s.text })),
      },
      stage1Answer,
      signal,
    );
  }
  const ids = new Set(segments.map((s) => s.id));
  const artifact: ReviewChunkArtifact = {
    index,
    model: llm.model,
    corrections: answer.corrections.filter((c) => ids.has(c.segment_id)),
    notes: answer.notes,
    reviewed_at: now().toISOString(),
  };
  await putJson(objects, key, artifact);
  return artifact;
}

/** Stage 2: the final corrected transcript, written to reviewed_result.json. */
export async function reviewTranscript(job: ActiveJob, objects: ObjectStore, llm: ReviewLlm, now: () => Date, signal?: AbortSignal): Promise<ReviewedResult> {
  const result = await loadResult(job, objects);
  const annotations: ReviewChunkArtifact[] = [];
  for (const chunk of job.chunks ?? []) {
    const parsed = reviewChunkArtifact.safeParse(await getJson(objects, artifactKeys.reviewChunk(job.spec, chunk.index)));
    if (!parsed.success) throw new AppError("unavailable", "checkpoint_missing", `review_chunk_${chunk.index}.json is missing`);
    annotations.push(parsed.data);
  }
  const answer = await askJson(
    llm,
    STAGE2_SYSTEM,
    {
      metadata: job.spec.metadata ?? {},
      language: result.metadata.language,
      segments: result.segments.map((s) => ({ id: s.id, start_time: s.start_time, end_time: s.end_time, text: s.text })),
      proposed_corrections: annotations.flatMap((a) => a.corrections),
      slice_notes: annotations.map((a) => a.notes).filter(Boolean),
    },
    stage2Answer,
    signal,
  );
  const corrected = new Map(answer.segments.map((s) => [s.id, s.text.trim()]));
  let changed = 0;
  const segments = result.segments.map((s) => {
    const text = corrected.get(s.id);
    if (text === undefined || text === "" || text === s.text) return s;
    changed++;
    return { ...s, text };
  });
  const reviewed: ReviewedResult = {
    ...result,
    text: segments.map((s) => s.text).join(" "),
    segments,
    review: { model: llm.model, corrected_segments: changed, notes: answer.notes, reviewed_at: now().toISOString() },
  };
  await putJson(objects, artifactKeys.reviewed(job.spec), reviewed);
  return reviewed;
}
