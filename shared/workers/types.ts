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
  /** Words and phrases to bias recognition towards (`keyterms`, at most 100); combined with `prompt` (keyterms.ts). */
  keyterms?: string[];
  /** Pin to one worker id (segment `worker_id`). */
  workerId?: string;
  signal?: AbortSignal;
  /**
   * Per-attempt timeout override, for callers without the segment plane's latency
   * budget (batch chunks, which may queue behind each other on a worker). Default:
   * the documented rule of the router.
   */
  timeoutMs?: number;
  /**
   * Straight to the fallback provider, skipping the workers: the realtime scheduler
   * spills utterances there when the local engines are full.
   */
  fallbackOnly?: boolean;
  /**
   * A partial re-decode of an open realtime item (services/vad/redecode.ts): the first
   * work dropped when the engines are busy. It goes only to a warm worker with a free
   * slot (else it fails `engine_busy` at once), never to the fallback, never twice, and
   * its failures do not count towards the breaker. Engines may decode it cheaper (whisper.cpp sizes its encoder window to it).
   */
  partial?: boolean;
  /**
   * A realtime item's final decoded ahead of its commit, during the pause that likely
   * ends it (services/vad/redecode.ts): dropped as a partial is (a free slot now or
   * `engine_busy`), decoded as a final is (whisper.cpp's whole window).
   */
  ahead?: boolean;
}

export interface TranscribeResult {
  result: VerboseTranscription;
  /** Worker that produced the result. */
  workerId: string;
  /** True when the fallback provider answered. */
  fallbackUsed: boolean;
  /**
   * True when the text came formatted from the engine (its announcement's
   * `formatsText`; the fallback provider is OpenAI-compatible and formats); false when
   * callers apply the smart-format stage.
   */
  formatted: boolean;
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
  /** Workers with a fresh heartbeat, as the registry shows them (the NATS router has it). */
  workers?(): WorkerAnnouncement[];
  /**
   * What the warm workers announce they carry together: clips at once and real-time
   * streams (shared/workers/registry.ts `announcedCapacity`).
   */
  capacity?(): { requests: number; streams: number; workers: number };
  /** True when a fallback provider is configured. */
  hasFallback?(): boolean;
  /**
   * Who takes clips now, for /readyz: warm workers in rotation, and those left out
   * until they announce themselves again (no responders, or an attempt timed out).
   */
  rotation?(): { warm: string[]; leftOut: string[] };
}

/** What one worker engine is asked to do: a clip and the request's hints. */
export interface EngineRequest {
  pcm: Int16Array;
  model?: string;
  language?: string;
  prompt?: string;
  keyterms?: string[];
  signal?: AbortSignal;
  /** A partial re-decode of a growing realtime item (TranscribeRequest.partial). */
  partial?: boolean;
}

/**
 * A transcription engine (PocketSphinx, whisper.cpp, an OpenAI-compatible server)
 * behind the one interface the worker service runs. Engines return the verbose_json
 * shape; times are seconds from the start of the clip.
 */
export interface TranscriptionEngine {
  /** Short engine kind: "pocketsphinx", "whisper-cpp", "openai". */
  readonly kind: string;
  /** Model names this engine answers for. */
  readonly models: string[];
  /** ISO-639-1 codes it transcribes ("*" = any); the router prefers a match for the hint. */
  readonly languages?: string[];
  /** Expected processing seconds per second of audio (real-time factor), for timeouts. */
  readonly realTimeFactor: number;
  /** How many clips it transcribes at once. */
  readonly concurrency: number;
  /**
   * True when the engine's text is punctuated and cased already; false when its words
   * need the smart-format stage (domain/transcript). Announced to the registry.
   */
  readonly formatsText: boolean;
  /** True once the model is loaded and a request would not pay a load. */
  warm(): boolean;
  transcribe(request: EngineRequest): Promise<VerboseTranscription>;
  close(): Promise<void>;
}

import type { WorkerAnnouncement } from "../../schemas/segment";
