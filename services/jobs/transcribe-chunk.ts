import { AppError } from "../../shared/errors";
import { shapeTranscription, transcriptPipeline } from "../../domain/transcript/pipeline";
import type { Diarizer } from "../../domain/diarization/diarize";
import { jobSpeakerTurns, sliceTurns } from "./diarize-job";
import { redactedSpans } from "./redact-audio";
import { getJson, putJson, type ObjectStore } from "../../shared/objects/index";
import { isTransientRoutingFailure } from "../../shared/workers/router";
import type { WorkerRouter } from "../../shared/workers/types";
import type { VerboseTranscription } from "../../schemas/transcription";
import { artifactKeys, chunkArtifact, type ChunkArtifact, type JobSegment } from "../../schemas/jobs";
import type { ChunkPlan } from "../../domain/jobs/events";
import type { ActiveJob } from "../../domain/jobs/decider";
import { toPcm } from "./slice-audio";
import { pickChannel } from "../../shared/audio/channels";

/**
 * The chunk transcription step. `chunk_{i}.json` in object storage is the checkpoint:
 * when a valid one for this job and this exact slice exists, it is reused and the
 * worker is not called again (resume after a crash or a resubmission). Otherwise the
 * slice's samples are read from `audio.pcm`, sent to the worker router, shifted to
 * absolute times, and the checkpoint is written before the ChunkTranscribed event.
 */
export interface TranscribeChunkDeps {
  objects: ObjectStore;
  router: WorkerRouter;
  now: () => Date;
  /** Who spoke when, for jobs with `diarize` (absent: the embedded diarizer). */
  diarizer?: Diarizer;
  signal?: AbortSignal;
}

export interface ChunkOutcome {
  segments: number;
  fromCheckpoint: boolean;
  workerId?: string;
}

const round3 = (x: number) => Math.round(x * 1000) / 1000;

/**
 * A slice's worker timeout: 2 s per audio second for each of the job's slices that may
 * be in flight at once, at least two minutes, at most 30. Unlike a segment request, a
 * slice may wait on the workers behind its siblings, so the router's latency-budget
 * rule (1.5 × real-time factor) would time out queued slices; the timeout here is only
 * there to notice a worker that died.
 */
const chunkTimeoutMs = (seconds: number, concurrency = 1) =>
  Math.min(30 * 60_000, Math.max(120_000, Math.ceil(seconds * 2000 * Math.max(1, concurrency))));

/**
 * How long a slice waits before trying again when no worker could take it (none warm,
 * no responders, timed out, NATS reconnecting): long enough for a restarted worker or
 * NATS to announce itself again (workers re-announce at once after a reconnect, and
 * every WORKER_HEARTBEAT_MS), so a job's attempts are not all spent inside one outage.
 */
const ROUTING_RETRY_AFTER_SECONDS = 10;

export async function transcribeChunk(job: ActiveJob, index: number, deps: TranscribeChunkDeps): Promise<ChunkOutcome> {
  const chunk = job.chunks?.[index];
  const audio = job.audio;
  if (!chunk || !audio) throw new AppError("internal", "chunk_missing", `chunk ${index} is not planned`);
  const key = artifactKeys.chunk(job.spec, index);
  const startTime = round3(chunk.startSample / audio.sampleRate);
  const endTime = round3(chunk.endSample / audio.sampleRate);

  const stored = chunkArtifact.safeParse(await getJson(deps.objects, key).catch(() => undefined));
  if (stored.success && isCheckpointOf(stored.data, job, chunk, startTime, endTime)) {
    return { segments: stored.data.segments.length, fromCheckpoint: true, ...(stored.data.worker_id ? { workerId: stored.data.worker_id } : {}) };
  }

  // multichannel: the slice's frames of the interleaved audio, its own channel taken out
  const channels = audio.channels ?? 1;
  const bytes = await deps.objects.getRange(audio.audioKey, chunk.startSample * 2 * channels, chunk.endSample * 2 * channels);
  if (!bytes) throw new AppError("unavailable", "audio_missing", "the job's audio is not in object storage");
  const result = await deps.router.transcribe({
    pcm: pickChannel(toPcm(bytes), channels, chunk.channel ?? 0),
    model: job.spec.model,
    language: job.spec.language,
    prompt: job.spec.prompt,
    keyterms: job.spec.keyterms,
    signal: deps.signal,
    timeoutMs: chunkTimeoutMs((chunk.endSample - chunk.startSample) / audio.sampleRate, job.spec.concurrency),
  }).catch((err: unknown) => {
    // A transient routing failure stays a retryable attempt, retried after a pause
    // (Retry-After, honoured by the step consumer as the least backoff).
    if (!isTransientRoutingFailure(err)) throw err;
    const e = err as AppError;
    throw new AppError(e.kind, e.code, e.message, { retryable: true, type: e.type, headers: { "Retry-After": String(ROUTING_RETRY_AFTER_SECONDS) }, cause: err });
  });
  // Shaped per slice: a slice's end ends a sentence, as an utterance's does. Speaker
  // turns come from the whole job's audio, so a speaker keeps its label across slices.
  const speakerTurns = job.spec.diarize ? sliceTurns(await jobSpeakerTurns(job, deps.objects, deps.diarizer), startTime, endTime) : undefined;
  const pipeline = transcriptPipeline({
    smartFormat: job.spec.smartFormat,
    engineFormatted: result.formatted,
    metadata: job.spec.metadata,
    prompt: job.spec.prompt,
    keyterms: job.spec.keyterms,
    redact: job.spec.redact,
    // a slice's ends are cuts, but for the recording's own (redact.ts `AudioCuts`)
    cuts: { start: chunk.startSample > 0, end: chunk.endSample < audio.samples },
    channel: chunk.channel,
    speakerTurns,
  });
  const formatted = shapeTranscription(pipeline, result.result);
  const segments = toAbsoluteSegments(formatted, startTime, endTime);
  const artifact: ChunkArtifact = {
    workflow_id: job.spec.workflowId,
    request_id: job.spec.requestId,
    index,
    start_time: startTime,
    end_time: endTime,
    language: job.spec.language ?? result.result.language,
    model: job.spec.model,
    worker_id: result.workerId,
    ...(chunk.channel === undefined ? {} : { channel: chunk.channel }),
    text: segments.map((s) => s.text).join(" "),
    segments,
    ...(job.spec.redact?.length ? { redacted_spans: redactedSpans(formatted, startTime, endTime) } : {}),
    transcribed_at: deps.now().toISOString(),
  };
  await putJson(deps.objects, key, artifact);
  return { segments: segments.length, fromCheckpoint: false, workerId: result.workerId };
}

function isCheckpointOf(a: ChunkArtifact, job: ActiveJob, chunk: ChunkPlan, startTime: number, endTime: number): boolean {
  return a.workflow_id === job.spec.workflowId && a.index === chunk.index && a.start_time === startTime && a.end_time === endTime;
}

/**
 * A worker's verbose_json (times from the start of the slice) → segments with absolute
 * times, clamped to the slice, non-empty text and a 0–1 confidence with 3 decimals.
 */
export function toAbsoluteSegments(result: VerboseTranscription, startTime: number, endTime: number): Omit<JobSegment, "id">[] {
  const out: Omit<JobSegment, "id">[] = [];
  for (const s of result.segments) {
    const text = s.text.trim();
    if (!text) continue;
    const start = round3(Math.min(endTime, Math.max(startTime, startTime + s.start)));
    const end = round3(Math.min(endTime, Math.max(start, startTime + s.end)));
    const channel = s.channel === undefined ? {} : { channel: s.channel };
    const speaker = s.speaker === undefined ? {} : { speaker: s.speaker, ...(s.speaker_role === undefined ? {} : { speaker_role: s.speaker_role }) };
    out.push({ start_time: start, end_time: end, duration: round3(end - start), text, confidence: segmentConfidence(result, s), ...channel, ...speaker });
  }
  return out;
}

/**
 * Mean word probability inside the segment when the engine gives word probabilities,
 * else exp(avg_logprob) (Whisper-style servers), else 1 − no_speech_prob.
 */
export function segmentConfidence(result: VerboseTranscription, segment: VerboseTranscription["segments"][number]): number {
  const words = result.words.filter((w) => w.probability !== undefined && w.start >= segment.start - 0.01 && w.end <= segment.end + 0.01);
  let c: number;
  if (words.length > 0) c = words.reduce((acc, w) => acc + w.probability!, 0) / words.length;
  else if (segment.avg_logprob !== 0) c = Math.exp(segment.avg_logprob);
  else c = 1 - segment.no_speech_prob;
  return round3(Math.min(1, Math.max(0, Number.isFinite(c) ? c : 0)));
}
