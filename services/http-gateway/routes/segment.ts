import { randomUUID } from "node:crypto";
import { segmentFailed, segmentTranscribed, type SegmentRequest } from "../../../domain/segments/events";
import { createSegmentStore, type SegmentStore } from "../../../domain/segments/store";
import type { Diarizer } from "../../../domain/diarization/diarize";
import { embeddedDiarizer, pcmAudio } from "../../../domain/diarization/embedded";
import { pieceCutter, stitchPieces } from "../../../domain/transcript/pieces";
import { transcriptPipeline } from "../../../domain/transcript/pipeline";
import { settledSegments } from "../../../domain/transcript/settled";
import { createRoute, type OpenAPIHono } from "@hono/zod-openapi";
import type { Context } from "hono";
import { openAiError } from "../../../schemas/http";
import { segmentForm } from "../../../schemas/segment";
import { diarizedTranscription, verboseTranscription, type VerboseTranscription } from "../../../schemas/transcription";
import type { AudioBudget } from "../../../domain/usage/budget";
import { decodeAudio, probeAudio } from "../../../shared/audio/decode";
import { createPcmMemory, PCM_BYTES_PER_SECOND, PcmMemoryRefusal, type PcmHold, type PcmMemory } from "../../../shared/audio/pcm-memory";
import { assertProbeFits, trustedDuration } from "../../../shared/audio/probe";
import { AppError, toAppError, validationError } from "../../../shared/errors";
import type { FairScheduler } from "../../../shared/workers/fair-scheduler";
import { limitRequests, requireApiKey, type GatewayEnv } from "../auth-middleware";
import { requireNats } from "../nats-ready";
import type { GatewayDeps } from "../deps";
import { parseFields, readForm } from "../segment-fields";
import { renderTranscription } from "../segment-formats";
import { splitChannels } from "../../../shared/audio/channels";
import { assertChannelCount, channelsTranscript, startChannels } from "../segment-channels";
import { createPieceScheduler, type PieceOutcome } from "../../../shared/workers/pieces-run";
import { streamPieces } from "../segment-stream";
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
 * 5. The worker router transcribes (warm primary, fallback, 502 `transcription_failed`);
 *    with `diarize`, the diarizer labels speaker turns over the whole clip meanwhile.
 *    A clip of at least SEGMENT_SPLIT_MIN_SECONDS, with two or more engine slots, is cut
 *    at pauses and its pieces decoded at once, each an ordinary router request, then
 *    stitched (shared/workers/pieces-run.ts; docs/design/segment.md, "Long clips in parallel").
 * 6. Usage (plane "segment", the clip's audio seconds) and a SegmentTranscribed audit
 *    event are appended before answering; a request that fails after authentication
 *    appends SegmentFailed (and bills nothing). Audit events go through the segment
 *    store (domain/segments), with ids derived from the request id.
 */
export const SEGMENT_PATH = "/v1/audio/transcriptions";

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
        "Multipart upload of one clip in any format ffmpeg decodes (WAV, MP3, FLAC, OGG/Opus, M4A, WebM). `response_format`: verbose_json (default), json, text, srt, vtt, diarized_json. " +
        "`diarize=true` (implied by diarized_json; optional `speakers`, or `min_speakers`/`max_speakers`, 1–10) labels speaker turns with the embedded diarizer: words and segments carry `speaker`, segments are split at turns, SRT/VTT cues name the speaker (docs/diarization.md). " +
        `The file may be at most ${deps.config.workers.maxUploadBytes} bytes (SEGMENT_MAX_UPLOAD_BYTES) and at most the plan's maxAudioSecondsPerRequest long. ` +
        "Headers: `X-Worker-Id` (the worker that answered), `X-Fallback-Used` (1 when the fallback provider answered). " +
        "Timing (spec 8): one attempt on a warm primary worker (800 ms, or longer for slow engines on long clips: docs/workers.md), then the fallback provider; no server-side retry. " +
        "A clip of 8 s or more (SEGMENT_SPLIT_MIN_SECONDS) is cut at pauses and its pieces decoded at once by the free engines, each piece under those rules (`X-Segment-Pieces`: how many; docs/segment.md). " +
        "Deprecated: a JSON job-submission body is accepted as a batch job (202, `Deprecation: true`, `Link` to /v1/audio/transcriptions/jobs).",
      security: [{ bearerAuth: [] }],
      request: { body: { required: true, content: { "multipart/form-data": { schema: segmentForm } } } },
      responses: {
        200: {
          description: "the transcription; headers X-Worker-Id and X-Fallback-Used",
          content: {
            "application/json": { schema: verboseTranscription.or(diarizedTranscription) },
            "text/plain": { schema: { type: "string" } },
            "text/vtt": { schema: { type: "string" } },
          },
        },
        202: { description: "deprecated JSON body: accepted as a batch job" },
        400: { description: "`invalid_content_type`, `missing_file`, `invalid_response_format`, `invalid_request` (with `param`: e.g. `speakers` outside 1–10 or without diarize, `min_speakers` above `max_speakers`); `unsupported_combination` (`stream` with diarized_json, `diarize` with `multichannel`, `stream` with `multichannel`)", content: { "application/json": { schema: openAiError } } },
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
  // One per process too: long clips' pieces take turns on the engines (shared/workers/pieces-run.ts).
  const scheduler = createPieceScheduler(deps.router);
  app.post(SEGMENT_PATH, (c) => handleSegment(c, deps, { diarizer: deps.diarizer ?? embeddedDiarizer, pcmMemory, segments, scheduler }));
}

interface SegmentPlane {
  diarizer: Diarizer;
  pcmMemory: PcmMemory;
  segments: SegmentStore;
  scheduler: FairScheduler;
}

async function handleSegment(c: Context<GatewayEnv>, deps: GatewayDeps, { diarizer, pcmMemory, segments, scheduler }: SegmentPlane): Promise<Response> {
  const principal = c.get("principal");
  const contentType = c.req.header("content-type") ?? "";
  if (!/^multipart\/form-data\b/i.test(contentType)) return legacyJobSubmission(c, deps, contentType);

  const started = performance.now();
  const requestId = `seg_${randomUUID().replace(/-/g, "")}`;
  c.set("requestId", requestId);
  c.header("X-Request-Id", requestId);
  const audit: SegmentRequest = { requestId, keyId: principal.keyId, ownerId: principal.ownerId, model: "stt-1", audioSeconds: 0, bytes: 0, responseFormat: "verbose_json" };
  let claimed: { budget: SegmentBudget; seconds: number } | undefined;
  let hold: PcmHold | undefined;
  /** The request failed after authentication: nothing is billed (its audio goes back to the budget); audited. */
  const failed = async (err: unknown, claim: typeof claimed): Promise<AppError> => {
    const e = toAppError(err);
    if (claim) await claim.budget.release(claim.seconds).catch(() => undefined);
    await segments
      .record(segmentFailed(audit, { code: e.code, message: e.message, totalMs: performance.now() - started }))
      .catch((auditErr) => deps.logger.warn("could not record SegmentFailed", { requestId, error: String(auditErr) }));
    return e;
  };
  try {
    const form = await readForm(c.req.raw, contentType, deps.config.workers.maxUploadBytes);
    const fields = parseFields(form);
    const bytes = new Uint8Array(await fields.file.arrayBuffer());
    Object.assign(audit, { model: fields.model, responseFormat: fields.responseFormat, bytes: bytes.byteLength });
    const taken = await takeClip(c, deps, pcmMemory, bytes, fields.multichannel, audit, (h) => (hold = h));
    const { audio, channels, billedSeconds, probeMs, decodeMs } = taken;
    claimed = taken.claimed;
    const clipHold = taken.hold;
    // the channels apart: the split copies are held too, the interleaved PCM only until split
    if (channels > 1) clipHold.resize(audio.pcm.byteLength * 2);
    const channelPcm = splitChannels(audio.pcm, channels);
    if (channels > 1) clipHold.resize(audio.pcm.byteLength);
    if (!deps.router) throw new AppError("unavailable", "no_workers", "no transcription workers are configured in this process");
    const workStarted = performance.now();
    const runs = startChannels(
      {
        router: deps.router,
        scheduler,
        // a streamed answer sends pieces' text in clip order: the first piece first
        cut: pieceCutter(deps.config.workers.pieces, fields.stream),
        inFlight: deps.config.workers.pieces.inFlight,
        request: { model: fields.model, language: fields.language, prompt: fields.prompt, keyterms: fields.keyterms, workerId: fields.workerId },
        signal: c.req.raw.signal,
        owner: principal.ownerId,
        requestId,
      },
      channelPcm,
      fields.multichannel,
    );
    const run = runs.runs[0]!;
    c.header("X-Segment-Pieces", String(runs.count));
    // While the engines decode: who spoke when, over the whole clip (docs/diarization.md;
    // never with multichannel, so the clip is the one channel).
    const speakerTurns = fields.diarize ? await diarizer.diarize(pcmAudio(channelPcm[0]!), fields.diarize) : undefined;
    const timing = (workerMs: number) =>
      `probe;dur=${probeMs.toFixed(2)}, decode;dur=${decodeMs.toFixed(2)}, worker;dur=${workerMs.toFixed(2)}, total;dur=${(performance.now() - started).toFixed(2)}`;
    const workers = (pieces: PieceOutcome[]) => [...new Set(pieces.map((p) => p.workerId))].join(", ");
    const pipelineFor = (formatted: boolean, channel?: number) =>
      transcriptPipeline({ smartFormat: fields.smartFormat, engineFormatted: formatted, prompt: fields.prompt, keyterms: fields.keyterms, redact: fields.redact, channel, speakerTurns });
    // the worker's time: the router's for one piece, the wall clock of all of them for several
    const workerMs = (pieces: PieceOutcome[]) => (runs.count === 1 ? pieces[0]!.workerMs : performance.now() - workStarted);
    /** Every piece of every channel is in: the delivered transcript, billed (per channel) and audited. */
    const finish = async (byChannel: PieceOutcome[][], worked = workerMs(byChannel.flat())): Promise<VerboseTranscription> => {
      const pieces = byChannel.flat();
      const result = channelsTranscript(byChannel, audio.durationSeconds, pipelineFor, fields.multichannel);
      await Promise.all([
        deps.usage.record({
          keyId: principal.keyId,
          ownerId: principal.ownerId,
          plane: "segment",
          audioSeconds: billedSeconds,
          requests: 1,
          subjectId: requestId,
          at: deps.now(),
        }),
        segments.record(
          segmentTranscribed(audit, {
            workerId: workers(pieces),
            fallbackUsed: pieces.some((p) => p.fallbackUsed),
            workerMs: worked,
            totalMs: performance.now() - started,
            textChars: result.text.length,
          }),
        ),
      ]);
      return result;
    };
    if (fields.stream) {
      // The answer starts with the first piece; the others follow as they come (segment-stream.ts).
      const first = await run.piece(0);
      c.header("X-Worker-Id", first.workerId);
      c.header("X-Fallback-Used", first.fallbackUsed ? "1" : "0");
      c.header("Server-Timing", timing(performance.now() - workStarted));
      const held = clipHold;
      hold = undefined; // the stream releases it
      const claim = claimed;
      return streamPieces(c, {
        run,
        first,
        settled: (pieces) => settledSegments(pipelineFor(pieces.every((p) => p.formatted)), stitchPieces(pieces, audio.durationSeconds)),
        finish: (pieces) => finish([pieces]),
        fail: (err) => failed(err, claim),
        end: () => held.release(),
      });
    }
    const byChannel = await runs.all();
    const pieces = byChannel.flat();
    const worked = workerMs(pieces);
    const result = await finish(byChannel, worked);
    // Where the time went (bench/segment.ts reads it): decode, worker(s), whole handler.
    c.header("Server-Timing", timing(worked));
    c.header("X-Worker-Id", workers(pieces));
    c.header("X-Fallback-Used", pieces.some((p) => p.fallbackUsed) ? "1" : "0");
    const shaped = fields.granularities && !fields.granularities.includes("word") ? { ...result, words: undefined } : result;
    const rendered = renderTranscription(shaped as VerboseTranscription, fields.responseFormat);
    c.header("Content-Type", rendered.contentType);
    return c.body(rendered.body, 200);
  } catch (err) {
    throw await failed(err, claimed);
  } finally {
    // The worker has answered (or the request failed): nothing reads the PCM any more.
    hold?.release();
  }
}

/**
 * Probe → limits → quota → decode → claim: a clip is refused on what its header shows
 * before any decoding is paid for (a 7 KB WAV claiming 1 Hz would decode to an hour),
 * then decoded no further than the key can pay for, then its seconds drawn from the live
 * budget. `held`: the PCM's room in memory, for the caller to release.
 */
async function takeClip(c: Context<GatewayEnv>, deps: GatewayDeps, pcmMemory: PcmMemory, bytes: Uint8Array, multichannel: boolean, audit: SegmentRequest, held: (hold: PcmHold) => void) {
  const principal = c.get("principal");
  const maxSeconds = principal.limits.maxAudioSecondsPerRequest;
  const probeStarted = performance.now();
  let probeMs = 0;
  const probe = await probeAudio(bytes).finally(() => {
    probeMs = performance.now() - probeStarted;
    c.header("Server-Timing", `probe;dur=${probeMs.toFixed(2)}`);
  });
  // multichannel: each channel is transcribed, held and billed on its own (docs/segment-reference.md "Multichannel")
  const channels = multichannel ? probe.channels : 1;
  assertChannelCount(channels);
  audit.audioSeconds = (trustedDuration(probe) ?? 0) * channels;
  assertProbeFits(probe, maxSeconds);
  const budget: SegmentBudget = deps.budgets
    ? deps.budgets.forKey(principal, deps.now())
    : deps.usage.budget(principal, deps.now());
  const remaining = await budget.remaining();
  assertWithinBudget(remaining, (trustedDuration(probe) ?? 0) * channels);
  // Room for the PCM, taken before decoding when the probe knows the length, so a
  // full server refuses a 4-hour FLAC without decoding it; decodeAudio resizes the
  // hold to the exact PCM before reading it into memory.
  const hold = pcmMemory.hold((trustedDuration(probe) ?? 0) * PCM_BYTES_PER_SECOND * channels);
  held(hold);
  // A clip whose length is only guessed is decoded no further than the key can pay for.
  const decodeStarted = performance.now();
  let decodeMs = 0;
  const audio = await decodeAudio(bytes, { maxSeconds: Math.min(maxSeconds, remaining / channels), probe, hold, channels })
    .catch((err: unknown) => {
      const overBudget = remaining / channels < maxSeconds && toAppError(err).code === "audio_too_long" && !(err instanceof PcmMemoryRefusal);
      throw overBudget ? quotaExhausted(remaining) : err;
    })
    .finally(() => {
      decodeMs = performance.now() - decodeStarted;
      // On a refusal too: what the request cost in decoding.
      c.header("Server-Timing", `probe;dur=${probeMs.toFixed(2)}, decode;dur=${decodeMs.toFixed(2)}`);
    });
  const billedSeconds = audio.durationSeconds * channels;
  audit.audioSeconds = billedSeconds;
  assertWithinBudget(remaining, billedSeconds);
  // Drawn from the live budget every plane shares before the engine is paid for; a
  // parallel request or session may have taken it meanwhile (then 429 as above).
  if (billedSeconds > 0 && (await budget.claim(billedSeconds)) === 0) throw quotaExhausted(await budget.remaining(), billedSeconds);
  return { audio, channels, billedSeconds, probeMs, decodeMs, hold, claimed: { budget, seconds: billedSeconds } };
}

/** A JSON body on the segment route: the deprecated job submission, answered 202 with its successor's address. */
async function legacyJobSubmission(c: Context<GatewayEnv>, deps: GatewayDeps, contentType: string): Promise<Response> {
  // Bounded to MAX_JSON_BODY_BYTES by the app's body limit before this runs.
  const text = (await c.req.text()).trim();
  if (/json/i.test(contentType) || text.startsWith("{")) {
    const body = await submitJob(deps, c.get("principal"), text);
    c.header("Deprecation", "true");
    c.header("Link", `<${JOBS_PATH}>; rel="successor-version"`);
    c.header("Location", body.endpoint);
    return c.json(body, 202);
  }
  throw validationError("invalid_content_type", "the body must be multipart/form-data with a `file` field (or, deprecated, a JSON job submission)", {
    type: "invalid_request_error",
  });
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
