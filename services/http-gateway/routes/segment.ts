import { randomUUID } from "node:crypto";
import { segmentFailed, segmentTranscribed, type SegmentRequest } from "../../../domain/segments/events";
import { createSegmentStore, type SegmentStore } from "../../../domain/segments/store";
import { shapeTranscription, transcriptPipeline } from "../../../domain/transcript/pipeline";
import { createRoute, type OpenAPIHono } from "@hono/zod-openapi";
import type { Context } from "hono";
import { openAiError } from "../../../schemas/http";
import { redactList, type RedactEntity } from "../../../schemas/redact";
import { issueErrorCode } from "../../../schemas/safe-string";
import { segmentFields, segmentForm } from "../../../schemas/segment";
import { verboseTranscription, type VerboseTranscription } from "../../../schemas/transcription";
import type { AudioBudget } from "../../../domain/usage/budget";
import { decodeAudio, probeAudio } from "../../../shared/audio/decode";
import { createPcmMemory, PCM_BYTES_PER_SECOND, PcmMemoryRefusal, type PcmHold, type PcmMemory } from "../../../shared/audio/pcm-memory";
import { assertProbeFits, trustedDuration } from "../../../shared/audio/probe";
import { AppError, toAppError, validationError } from "../../../shared/errors";
import { limitRequests, requireApiKey, type GatewayEnv } from "../auth-middleware";
import { readBounded } from "../body-limit";
import { requireNats } from "../nats-ready";
import type { GatewayDeps } from "../deps";
import { renderTranscription, type ResponseFormat } from "../segment-formats";
import { JOBS_PATH, submitJob } from "./jobs";

/**
 * POST /v1/audio/transcriptions: the segment plane (spec 4.2, 7.2, 8).
 *
 * 1. Authenticate (401) and count the request against maxRequestsPerMinute.
 * 2. A JSON body is the deprecated job submission: handed to the batch plane's
 *    submitJob, answered 202 with `Deprecation: true` and a `Link` to /jobs.
 * 3. Anything else must be multipart/form-data (400 `invalid_content_type`), at most
 *    SEGMENT_MAX_UPLOAD_BYTES of file plus 64 KiB of form fields (413
 *    `file_too_large`), with a `file` part (400 `missing_file`).
 * 4. Probe the file (RIFF header, else ffprobe): not audio, or a sample rate outside
 *    8–384 kHz, is 415 `unsupported_audio`; a clip longer than the plan's
 *    maxAudioSecondsPerRequest is 413 `audio_too_long`; a key whose billing-window
 *    budget cannot cover it is 429 `audio_quota_exhausted`: all before decoding. Then
 *    decode with ffmpeg to 16 kHz mono PCM16, bounded to what the plan and the budget
 *    allow (shared/audio/decode.ts), and check both again on the decoded length.
 *    The clip's PCM is held whole until the worker answers (the engines take whole
 *    clips), so it is counted against the process's DECODE_MEMORY_MAX_MB
 *    (shared/audio/pcm-memory.ts): from the probe's length before decoding when it is
 *    known, at the exact size before the PCM is read into memory. No room now is 503
 *    `server_busy` with Retry-After; a clip bigger than the whole bound is 413
 *    `audio_too_long`.
 *    Silence, empty and low-energy clips are transcribed and billed like any other.
 * 5. The worker router transcribes (warm primary, fallback, 502 `transcription_failed`).
 * 6. Usage (plane "segment", the clip's audio seconds) and a SegmentTranscribed audit
 *    event are appended before answering; a request that fails after authentication
 *    appends SegmentFailed (and bills nothing). Audit events go through the segment
 *    store (domain/segments), with ids derived from the request id.
 */
export const SEGMENT_PATH = "/v1/audio/transcriptions";
const FORM_FIELDS_ALLOWANCE = 64 * 1024;
const MAX_PROMPT_CHARS = 4000;

type SegmentBudget = Pick<AudioBudget, "remaining" | "claim" | "release">;

export function registerSegmentRoutes(app: OpenAPIHono<GatewayEnv>, deps: GatewayDeps): void {
  app.use(SEGMENT_PATH, requireApiKey(deps), requireNats(deps), limitRequests(deps));
  app.openAPIRegistry.registerPath(
    createRoute({
      method: "post",
      path: SEGMENT_PATH,
      tags: ["segment"],
      summary: "Transcribe one speech clip (synchronous)",
      description:
        "Multipart upload of one clip in any format ffmpeg decodes (WAV, MP3, FLAC, OGG/Opus, M4A, WebM). `response_format`: verbose_json (default), json, text, srt, vtt. " +
        `The file may be at most ${deps.config.workers.maxUploadBytes} bytes (SEGMENT_MAX_UPLOAD_BYTES) and at most the plan's maxAudioSecondsPerRequest long. ` +
        "Headers: `X-Worker-Id` (the worker that answered), `X-Fallback-Used` (1 when the fallback provider answered). " +
        "Timing (spec 8): one attempt on a warm primary worker (800 ms, or longer for slow engines on long clips: docs/workers.md), then the fallback provider; no server-side retry. " +
        "Deprecated: a JSON job-submission body is accepted as a batch job (202, `Deprecation: true`, `Link` to /v1/audio/transcriptions/jobs).",
      security: [{ bearerAuth: [] }],
      request: { body: { required: true, content: { "multipart/form-data": { schema: segmentForm } } } },
      responses: {
        200: {
          description: "the transcription; headers X-Worker-Id and X-Fallback-Used",
          content: {
            "application/json": { schema: verboseTranscription },
            "text/plain": { schema: { type: "string" } },
            "text/vtt": { schema: { type: "string" } },
          },
        },
        202: { description: "deprecated JSON body: accepted as a batch job" },
        400: { description: "`invalid_content_type`, `missing_file`, `invalid_request`", content: { "application/json": { schema: openAiError } } },
        401: { description: "authentication failed", content: { "application/json": { schema: openAiError } } },
        413: { description: "`file_too_large` or `audio_too_long`", content: { "application/json": { schema: openAiError } } },
        415: { description: "`unsupported_audio`: the file is not decodable audio, or declares a sample rate outside 8–384 kHz", content: { "application/json": { schema: openAiError } } },
        429: { description: "rate limit or `audio_quota_exhausted`", content: { "application/json": { schema: openAiError } } },
        502: { description: "`transcription_failed`: every worker attempt failed; the message names the timeout in ms", content: { "application/json": { schema: openAiError } } },
        503: { description: "`server_busy` (with Retry-After): this process holds as much decoded audio as DECODE_MEMORY_MAX_MB allows; `nats_unavailable` (with Retry-After): NATS is down or not yet declared again after a reconnect; `decode_timeout`", content: { "application/json": { schema: openAiError } } },
      },
    }),
  );
  // One per process (one gateway app per process): the decoded audio all requests hold at once.
  const pcmMemory = createPcmMemory(deps.config.workers.decodeMemoryMaxBytes);
  for (const [plan, limits] of Object.entries(deps.config.plans)) {
    const decodedBytes = limits.maxAudioSecondsPerRequest * PCM_BYTES_PER_SECOND;
    if (decodedBytes <= pcmMemory.limitBytes) continue;
    deps.logger.warn("DECODE_MEMORY_MAX_MB cannot hold this plan's longest clips: they are refused 413 audio_too_long", {
      plan,
      maxAudioSecondsPerRequest: limits.maxAudioSecondsPerRequest,
      decodedMiB: Math.ceil(decodedBytes / 2 ** 20),
      decodeMemoryMaxMiB: Math.floor(pcmMemory.limitBytes / 2 ** 20),
    });
  }
  const segments = createSegmentStore(deps.nats);
  app.post(SEGMENT_PATH, (c) => handleSegment(c, deps, pcmMemory, segments));
}

async function handleSegment(c: Context<GatewayEnv>, deps: GatewayDeps, pcmMemory: PcmMemory, segments: SegmentStore): Promise<Response> {
  const principal = c.get("principal");
  const contentType = c.req.header("content-type") ?? "";
  if (!/^multipart\/form-data\b/i.test(contentType)) {
    // Bounded to MAX_JSON_BODY_BYTES by the app's body limit before this runs.
    const text = (await c.req.text()).trim();
    if (/json/i.test(contentType) || text.startsWith("{")) {
      const body = await submitJob(deps, principal, text);
      c.header("Deprecation", "true");
      c.header("Link", `<${JOBS_PATH}>; rel="successor-version"`);
      c.header("Location", body.endpoint);
      return c.json(body, 202);
    }
    throw validationError("invalid_content_type", "the body must be multipart/form-data with a `file` field (or, deprecated, a JSON job submission)", {
      type: "invalid_request_error",
    });
  }

  const started = performance.now();
  const requestId = `seg_${randomUUID().replace(/-/g, "")}`;
  c.set("requestId", requestId);
  c.header("X-Request-Id", requestId);
  const audit: SegmentRequest = { requestId, keyId: principal.keyId, ownerId: principal.ownerId, model: "stt-1", audioSeconds: 0, bytes: 0, responseFormat: "verbose_json" };
  let claimed: { budget: SegmentBudget; seconds: number } | undefined;
  let hold: PcmHold | undefined;
  try {
    const form = await readForm(c.req.raw, contentType, deps.config.workers.maxUploadBytes);
    const fields = parseFields(form);
    const bytes = new Uint8Array(await fields.file.arrayBuffer());
    Object.assign(audit, { model: fields.model, responseFormat: fields.responseFormat, bytes: bytes.byteLength });
    // Probe → limits → quota → decode: a clip is refused on what its header shows before
    // any decoding is paid for (a 7 KB WAV claiming 1 Hz would decode to an hour).
    const maxSeconds = principal.limits.maxAudioSecondsPerRequest;
    const probeStarted = performance.now();
    let probeMs = 0;
    const probe = await probeAudio(bytes).finally(() => {
      probeMs = performance.now() - probeStarted;
      c.header("Server-Timing", `probe;dur=${probeMs.toFixed(2)}`);
    });
    audit.audioSeconds = trustedDuration(probe) ?? 0;
    assertProbeFits(probe, maxSeconds);
    const budget: SegmentBudget = deps.budgets
      ? deps.budgets.forKey(principal, deps.now())
      : deps.usage.budget(principal, deps.now());
    const remaining = await budget.remaining();
    assertWithinBudget(remaining, trustedDuration(probe) ?? 0);
    // Room for the PCM, taken before decoding when the probe knows the length, so a
    // full server refuses a 4-hour FLAC without decoding it; decodeAudio resizes the
    // hold to the exact PCM before reading it into memory.
    hold = pcmMemory.hold((trustedDuration(probe) ?? 0) * PCM_BYTES_PER_SECOND);
    // A clip whose length is only guessed is decoded no further than the key can pay for.
    const decodeStarted = performance.now();
    let decodeMs = 0;
    const audio = await decodeAudio(bytes, { maxSeconds: Math.min(maxSeconds, remaining), probe, hold })
      .catch((err: unknown) => {
        const overBudget = remaining < maxSeconds && toAppError(err).code === "audio_too_long" && !(err instanceof PcmMemoryRefusal);
        throw overBudget ? quotaExhausted(remaining) : err;
      })
      .finally(() => {
        decodeMs = performance.now() - decodeStarted;
        // On a refusal too: what the request cost in decoding.
        c.header("Server-Timing", `probe;dur=${probeMs.toFixed(2)}, decode;dur=${decodeMs.toFixed(2)}`);
      });
    audit.audioSeconds = audio.durationSeconds;
    assertWithinBudget(remaining, audio.durationSeconds);
    // Drawn from the live budget every plane shares before the engine is paid for; a
    // parallel request or session may have taken it meanwhile (then 429 as above).
    if (audio.durationSeconds > 0 && (await budget.claim(audio.durationSeconds)) === 0) throw quotaExhausted(await budget.remaining(), audio.durationSeconds);
    claimed = { budget, seconds: audio.durationSeconds };
    if (!deps.router) throw new AppError("unavailable", "no_workers", "no transcription workers are configured in this process");
    const out = await deps.router.transcribe({
      pcm: audio.pcm,
      model: fields.model,
      language: fields.language,
      prompt: fields.prompt,
      workerId: fields.workerId,
      signal: c.req.raw.signal,
    });
    const transcribed = { ...out.result, duration: out.result.duration || audio.durationSeconds };
    const result = shapeTranscription(transcriptPipeline({ smartFormat: fields.smartFormat, engineFormatted: out.formatted, prompt: fields.prompt, redact: fields.redact }), transcribed);
    const now = deps.now();
    await Promise.all([
      deps.usage.record({
        keyId: principal.keyId,
        ownerId: principal.ownerId,
        plane: "segment",
        audioSeconds: audio.durationSeconds,
        requests: 1,
        subjectId: requestId,
        at: now,
      }),
      segments.record(
        segmentTranscribed(audit, { workerId: out.workerId, fallbackUsed: out.fallbackUsed, workerMs: out.workerMs, totalMs: performance.now() - started, textChars: result.text.length }),
      ),
    ]);
    c.header("X-Worker-Id", out.workerId);
    c.header("X-Fallback-Used", out.fallbackUsed ? "1" : "0");
    // Where the time went (bench/segment.ts reads it): decode, worker(s), whole handler.
    c.header("Server-Timing", `probe;dur=${probeMs.toFixed(2)}, decode;dur=${decodeMs.toFixed(2)}, worker;dur=${out.workerMs.toFixed(2)}, total;dur=${(performance.now() - started).toFixed(2)}`);
    if (fields.stream) return streamTranscription(c, result);
    const shaped = fields.granularities && !fields.granularities.includes("word") ? { ...result, words: undefined } : result;
    const rendered = renderTranscription(shaped as VerboseTranscription, fields.responseFormat);
    c.header("Content-Type", rendered.contentType);
    return c.body(rendered.body, 200);
  } catch (err) {
    const e = toAppError(err);
    // nothing is billed for a failed request: give its audio back to the budget
    if (claimed) await claimed.budget.release(claimed.seconds).catch(() => undefined);
    await segments
      .record(segmentFailed(audit, { code: e.code, message: e.message, totalMs: performance.now() - started }))
      .catch((auditErr) => deps.logger.warn("could not record SegmentFailed", { requestId, error: String(auditErr) }));
    throw e;
  } finally {
    // The worker has answered (or the request failed): nothing reads the PCM any more.
    hold?.release();
  }
}

function assertWithinBudget(remaining: number, seconds: number): void {
  if (remaining <= 0 || seconds > remaining) throw quotaExhausted(remaining, seconds);
}

function quotaExhausted(remaining: number, seconds?: number): AppError {
  const clip = seconds === undefined ? "longer" : `${seconds.toFixed(1)} s`;
  return new AppError("rate_limited", "audio_quota_exhausted", `the audio budget of this key's billing window has ${remaining} s left; this clip is ${clip}`, {
    retryable: true,
  });
}

interface SegmentFields {
  file: Blob;
  model: string;
  language?: string;
  prompt?: string;
  responseFormat: ResponseFormat;
  workerId?: string;
  /** OpenAI's `stream=true`: server-sent transcript.text.delta / transcript.text.done events. */
  stream: boolean;
  /** `timestamp_granularities[]` when given: verbose_json carries `words` only if "word" is asked for. */
  granularities?: ("word" | "segment")[];
  /** `smart_format` (default true): punctuation, casing and numerals for engines that lack them. */
  smartFormat: boolean;
  /** `redact` (repeated or comma-separated): entities replaced by their labels (docs/formatting.md). */
  redact?: RedactEntity[];
}

function parseFields(form: FormData): SegmentFields {
  const file = form.get("file");
  if (file === null || typeof file === "string") {
    throw validationError("missing_file", "the `file` field (a file upload) is required", { param: "file", type: "invalid_request_error" });
  }
  const text = (name: string) => {
    const v = form.get(name);
    if (v === null) return undefined;
    if (typeof v !== "string") throw validationError("invalid_request", `\`${name}\` must be a text field`, { param: name });
    return v.trim() === "" ? undefined : v.trim();
  };
  const parsed = segmentFields.safeParse({
    model: text("model"),
    language: text("language"),
    prompt: text("prompt"),
    response_format: text("response_format"),
    worker_id: text("worker_id"),
  });
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const param = issue.path.join(".");
    throw validationError(issueErrorCode(issue, param === "response_format" ? "invalid_response_format" : "invalid_request"), `${param}: ${issue.message}`, { param });
  }
  const f = parsed.data;
  return {
    file,
    model: f.model,
    language: f.language,
    prompt: f.prompt?.slice(0, MAX_PROMPT_CHARS),
    responseFormat: f.response_format,
    workerId: f.worker_id,
    stream: parseBoolean("stream", text("stream"), false),
    smartFormat: parseBoolean("smart_format", text("smart_format"), true),
    granularities: parseGranularities(form),
    redact: parseRedact(form),
    ...refuseIncludes(form),
  };
}

function parseBoolean(name: string, value: string | undefined, absent: boolean): boolean {
  if (value === undefined) return absent;
  if (value === "true") return true;
  if (value === "false") return false;
  throw validationError("invalid_request", `${name}: must be true or false`, { param: name });
}

function parseRedact(form: FormData): RedactEntity[] | undefined {
  const values = repeated(form, "redact");
  if (values.length === 0) return undefined;
  const parsed = redactList.safeParse(values);
  if (!parsed.success) throw validationError("invalid_request", `redact: ${parsed.error.issues[0]!.message}`, { param: "redact" });
  return parsed.data;
}

/** All values of a repeated field, under its OpenAI name with or without `[]`. */
function repeated(form: FormData, name: string): string[] {
  return [...form.getAll(`${name}[]`), ...form.getAll(name)].map((v) => (typeof v === "string" ? v.trim() : "")).filter(Boolean);
}

function parseGranularities(form: FormData): ("word" | "segment")[] | undefined {
  const values = repeated(form, "timestamp_granularities");
  if (values.length === 0) return undefined;
  for (const v of values) {
    if (v !== "word" && v !== "segment") {
      throw validationError("invalid_request", `timestamp_granularities: ${JSON.stringify(v.slice(0, 40))} is not one of word, segment`, { param: "timestamp_granularities" });
    }
  }
  return values as ("word" | "segment")[];
}

/** `include[]` asks for extras (OpenAI: `logprobs`); none is produced here, so each is refused by name. */
function refuseIncludes(form: FormData): Record<string, never> {
  const values = repeated(form, "include");
  if (values.length > 0) {
    throw validationError("unsupported_include", `include: ${JSON.stringify(values[0]!.slice(0, 40))} is not supported by this server (no include values are)`, { param: "include" });
  }
  return {};
}

/**
 * OpenAI's streamed transcription: server-sent `transcript.text.delta` events, one per
 * segment as the result is read, then `transcript.text.done` with the whole text and
 * the usage. The segment plane's engines answer whole clips, so the deltas follow the
 * transcription rather than the decoding.
 */
function streamTranscription(c: Context<GatewayEnv>, result: VerboseTranscription): Response {
  const encoder = new TextEncoder();
  const event = (data: unknown) => encoder.encode(`data: ${JSON.stringify(data)}\n\n`);
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      const parts = result.segments.length ? result.segments.map((s, i) => (i === 0 ? s.text.trimStart() : s.text)) : [result.text];
      for (const delta of parts) if (delta) controller.enqueue(event({ type: "transcript.text.delta", delta }));
      controller.enqueue(event({ type: "transcript.text.done", text: result.text, usage: { type: "duration", seconds: Math.ceil(result.duration) } }));
      controller.close();
    },
  });
  c.header("Content-Type", "text/event-stream; charset=utf-8");
  c.header("Cache-Control", "no-store");
  return c.body(body, 200);
}

/** Reads the multipart body with a byte limit (413 before buffering more than that). */
async function readForm(request: Request, contentType: string, maxFileBytes: number): Promise<FormData> {
  const limit = maxFileBytes + FORM_FIELDS_ALLOWANCE;
  const declared = Number(request.headers.get("content-length") ?? "NaN");
  if (Number.isFinite(declared) && declared > limit) throw fileTooLarge(maxFileBytes);
  const body = request.body ? await readBounded(request.body, limit) : new Uint8Array(0);
  if (body === undefined) throw fileTooLarge(maxFileBytes);
  let form: FormData;
  try {
    form = await new Response(body as Uint8Array<ArrayBuffer>, { headers: { "content-type": contentType } }).formData();
  } catch {
    throw validationError("invalid_multipart", "the multipart/form-data body could not be parsed", { type: "invalid_request_error" });
  }
  const file = form.get("file");
  if (file !== null && typeof file !== "string" && file.size > maxFileBytes) throw fileTooLarge(maxFileBytes);
  return form;
}

function fileTooLarge(maxFileBytes: number): AppError {
  return new AppError("too_large", "file_too_large", `the file is larger than the ${maxFileBytes}-byte upload limit`, {
    param: "file",
    type: "invalid_request_error",
  });
}
