import type { VerboseTranscription } from "../../schemas/transcription";

/**
 * The contract between callers (segment route, batch chunk transcriber, realtime
 * transcriber) and transcription workers. Audio always travels as 16 kHz mono
 * PCM16LE; callers decode first (shared/audio).
 */
export interface TranscribeRequest {
  /** 16 kHz mono signed 16-bit little-endian samples. */
  pcm: Int16Array;
  model?: string;
  /** ISO-639-1 hint. */
  language?: string;
  /** Context prompt / vocabulary hint. */
  prompt?: string;
  /** Pin to one worker id (segment `worker_id`). */
  workerId?: string;
  signal?: AbortSignal;
}

export interface TranscribeResult {
  result: VerboseTranscription;
  /** Worker that produced the result. */
  workerId: string;
  /** True when the fallback provider answered. */
  fallbackUsed: boolean;
  /** Milliseconds spent in the worker(s), for overhead measurements. */
  workerMs: number;
}

/**
 * Routes a clip to a warm worker with the spec's timing rules (section 8): a warm
 * primary (honouring `workerId`), one attempt with a per-attempt timeout, then the
 * fallback provider; throws AppError `transcription_failed` (502) when both fail.
 */
export interface WorkerRouter {
  transcribe(request: TranscribeRequest): Promise<TranscribeResult>;
  /** False when the circuit breaker over the workers is open (realtime admission). */
  available(): boolean;
  /** Seconds until the breaker half-opens, for Retry-After. */
  retryAfterSeconds(): number;
}
