import { availableParallelism } from "node:os";
import { z } from "zod";
import type { PlanCatalog } from "../schemas/plans";
import { loadPlanCatalog } from "./plans";

/**
 * The one configuration object of a process: parsed from the environment with zod,
 * frozen, failing fast with every problem listed. All embedded defaults live here and
 * nowhere else; docs/configuration.md lists every variable.
 */
const bool = z
  .enum(["1", "0", "true", "false", "yes", "no", "on", "off", ""])
  .transform((v) => ["1", "true", "yes", "on"].includes(v));
const int = z.coerce.number().int();
const num = z.coerce.number();
const optionalString = z
  .string()
  .optional()
  .transform((v) => (v === undefined || v.trim() === "" ? undefined : v));

const envSchema = z.object({
  // process
  LOG_LEVEL: z.enum(["debug", "info", "warn", "error"]).default("info"),
  STT_SERVICES: z.string().default("all"),
  DATA_DIR: z.string().default(".data"),
  // plans beyond free and pro (JSON file, see docs/keys-and-auth.md)
  PLANS_FILE: optionalString,
  // `stt supervise`: restart backoff and when to give up
  SUPERVISE_INITIAL_DELAY_MS: int.min(0).default(1000),
  SUPERVISE_MAX_CRASHES: int.min(1).default(10),
  // `stt supervise`: how the services are spread over `stt serve` processes (services/stt/layout.ts)
  STT_LAYOUT: z.string().default("auto"),
  // `stt serve`: how long a stop may drain before the process exits anyway
  SHUTDOWN_TIMEOUT_MS: int.min(0).default(10_000),

  // HTTP/WebSocket listener (one base URL)
  HOST: z.string().default("0.0.0.0"),
  PORT: int.min(0).max(65535).default(8080),
  /** /metrics for a process that serves no HTTP (a process with a gateway serves it on PORT); 0 = a free port. */
  METRICS_PORT: int.min(0).max(65535).default(9464),
  /** Let several processes listen on PORT (SO_REUSEPORT, the kernel splits connections); off: one instance per port. */
  STT_REUSE_PORT: bool.default(false),
  PUBLIC_BASE_URL: optionalString,

  // NATS / JetStream
  NATS_URL: z.string().default("nats://127.0.0.1:4222"),
  NATS_PREFIX: z
    .string()
    .regex(/^[a-z][a-z0-9_]*$/, "lowercase letters, digits and underscores, starting with a letter")
    .default("stt"),
  NATS_REPLICAS: int.min(1).max(5).default(1),
  NATS_UNHEALTHY_LIVENESS_MS: int.min(1000).default(60_000),
  READINESS_PROJECTION_MAX_LAG_MS: int.min(1000).default(15_000),

  // Postgres read models
  DATABASE_URL: z.string().default("postgres://postgres@127.0.0.1:5432/postgres"),
  DATABASE_SCHEMA: z
    .string()
    .regex(/^[a-z_][a-z0-9_]*$/, "a plain lowercase identifier")
    .default("stt"),
  DATABASE_POOL_MAX: int.min(1).default(10),
  DATABASE_STATEMENT_TIMEOUT_MS: int.min(100).default(5000),

  // object storage
  OBJECT_STORE: z.enum(["fs", "s3"]).default("fs"),
  OBJECT_STORE_DIR: optionalString,
  S3_ENDPOINT: optionalString,
  S3_REGION: z.string().default("us-east-1"),
  S3_BUCKET: z.string().default("stt-artifacts"),
  S3_ACCESS_KEY_ID: optionalString,
  S3_SECRET_ACCESS_KEY: optionalString,
  S3_FORCE_PATH_STYLE: bool.default(true),

  // auth
  GATEWAY_ADMIN_TOKEN: optionalString,
  GATEWAY_SESSION_TOKEN_SECRET: optionalString,
  GATEWAY_ENABLED: bool.default(true),
  KEY_PROJECTION_WAIT_MS: int.min(0).default(3000),
  KEY_CACHE_TTL_MS: int.min(0).default(30_000),
  KEY_NEGATIVE_CACHE_TTL_MS: int.min(0).max(60_000).default(5_000),
  AUTH_FAILURES_PER_MINUTE: int.min(1).default(30),
  TRUSTED_PROXY_HOPS: int.min(0).max(10).default(0),

  // usage and quotas
  USAGE_WINDOW_SECONDS: int.min(60).default(86_400),

  // transcription workers (segment plane)
  WORKER_EMBEDDED: z.enum(["pocketsphinx", "none"]).default("pocketsphinx"),
  WORKER_ATTEMPT_TIMEOUT_MS: int.min(1).default(800),
  WORKER_HEARTBEAT_MS: int.min(100).default(2000),
  WHISPER_MODEL_PATH: optionalString,
  WORKER_OPENAI_URL: optionalString,
  WORKER_OPENAI_API_KEY: optionalString,
  WORKER_OPENAI_MODEL: optionalString,
  FALLBACK_OPENAI_URL: optionalString,
  FALLBACK_OPENAI_API_KEY: optionalString,
  FALLBACK_OPENAI_MODEL: optionalString,
  SEGMENT_MAX_UPLOAD_BYTES: int.min(1).default(25 * 1024 * 1024),
  // long segment clips cut at pauses and decoded in parallel (docs/design/segment.md, "Long clips in parallel")
  SEGMENT_SPLIT_MIN_SECONDS: num.min(1).default(8),
  SEGMENT_PIECE_MAX_SECONDS: num.min(1).default(30),
  SEGMENT_PIECE_MIN_SECONDS: num.min(0.5).default(1),
  SEGMENT_PIECES_IN_FLIGHT: int.min(1).default(8),
  // decoded segment audio held at once per process (shared/audio/pcm-memory.ts): two 4-hour clips
  DECODE_MEMORY_MAX_MB: int.min(1).default(1024),
  WORKER_ID: optionalString,
  POCKETSPHINX_PROCESSES: int.min(0).default(0),
  POCKETSPHINX_REAL_TIME_FACTOR: num.positive().default(2),
  WHISPER_REAL_TIME_FACTOR: num.positive().default(1),
  /** Clips whisper.cpp decodes at once (decoder states over one model); 0: one per two cores. */
  WHISPER_PARALLEL: int.min(0).default(0),
  /** Threads per whisper.cpp clip; 0: the cores shared out among the parallel clips. */
  WHISPER_THREADS: int.min(0).default(0),
  WHISPER_TEMPERATURE_FALLBACK: bool.default(true),
  /** OpenMP's wait policy for whisper.cpp's decode threads: PASSIVE on cores shared with the other services, ACTIVE (spin) on cores of its own. */
  WHISPER_OMP_WAIT_POLICY: z.enum(["PASSIVE", "ACTIVE"]).default("PASSIVE"),
  WORKER_OPENAI_REAL_TIME_FACTOR: num.positive().default(0.1),
  WORKER_OPENAI_CONCURRENCY: int.min(1).default(8),
  FALLBACK_REAL_TIME_FACTOR: num.positive().default(0.1),

  // batch jobs
  JOB_FETCH_MAX_BYTES: int.min(1).default(500 * 1024 * 1024),
  JOB_FETCH_TIMEOUT_MS: int.min(1).default(120_000),
  JOB_ALLOW_PRIVATE_URLS: bool.default(false),
  // downloads in flight per fetcher replica (one owner holds at most half) and decodes
  JOB_FETCH_CONCURRENCY: int.min(1).default(8),
  JOB_DECODE_CONCURRENCY: int.min(1).default(2),
  // a download below this rate over the window fails with fetch_too_slow (0 = off)
  JOB_FETCH_MIN_BYTES_PER_SECOND: int.min(0).default(8192),
  JOB_FETCH_MIN_RATE_WINDOW_MS: int.min(100).default(15_000),
  WEBHOOK_SIGNING_SECRET: optionalString,
  REVIEW_LLM_URL: optionalString,
  REVIEW_LLM_API_KEY: optionalString,
  REVIEW_LLM_MODEL: z.string().default("gpt-4o-mini"),
  REVIEW_LLM_TIMEOUT_MS: int.min(1).default(120_000),
  JOB_STEP_ACK_WAIT_MS: int.min(1000).default(30_000),
  JOB_STEP_MAX_ATTEMPTS: int.min(1).default(4),
  JOB_TRANSCRIBE_CONCURRENCY: int.min(1).default(6),
  JOB_WEBHOOK_MAX_ATTEMPTS: int.min(1).default(6),
  JOB_WEBHOOK_BACKOFF_MS: int.min(1).default(1000),
  JOB_WEBHOOK_TIMEOUT_MS: int.min(1).default(10_000),
  // ended jobs older than this lose their artifacts and read-model row (0 = keep forever)
  JOB_RETENTION_DAYS: num.min(0).default(30),

  // realtime
  RT_MAX_FRAME_BYTES: int.min(1).default(1024 * 1024),
  RT_DEFAULT_SAMPLE_RATE: int.default(16_000),
  RT_VAD_PARTITIONS: int.min(1).max(64).default(4),
  RT_VAD_AGGRESSIVENESS: int.min(0).max(3).default(3),
  RT_VAD_THRESHOLD: num.min(0.1).max(1).default(0.6),
  RT_VAD_SILENCE_MS: int.min(100).max(5000).default(500),
  RT_VAD_PREFIX_PADDING_MS: int.min(0).max(2000).default(300),
  RT_VAD_MAX_UTTERANCE_MS: int.min(1000).max(30000).default(20000),
  RT_MAX_PENDING_ACKS: int.min(1).default(64),
  RT_BACKPRESSURE_GRACE_MS: int.min(0).default(1000),
  RT_MAX_CLIENT_BUFFER_BYTES: int.min(1).default(1024 * 1024),
  RT_LEASE_TTL_MS: int.min(1000).default(15_000),
  RT_VAD_LEASE_TTL_MS: int.min(600).default(6000),
  RT_TRANSCRIBE_CONCURRENCY: int.min(1).default(16),
  RT_MAX_TRANSCRIPT_WAIT_MS: int.min(100).default(5000),
  /** Admission by headroom (domain/sessions/admission.ts, docs/realtime-reference.md "Admission and shedding"). */
  RT_ADMIT_MAX_LOOP_DELAY_MS: int.min(1).default(100),
  RT_ADMIT_MAX_VAD_LAG_MS: int.min(1).default(150),
  RT_ADMIT_MAX_DECISION_MS: int.min(1).default(120),
  RT_ADMIT_MAX_ENGINE_SHARE: num.min(0.01).max(1).default(0.7),
  RT_ENGINE_SPEAKER_CORES: num.min(0.001).max(8).default(0.06),
  RT_ADMIT_BURST: int.min(1).default(50),
  RT_ADMIT_SESSIONS_PER_CORE: int.min(1).default(75),
  RT_ADMIT_MAX_MACHINE_SHARE: num.min(0).max(1).default(0.75),
  RT_ADMIT_SETTLE_MS: int.min(0).default(1000),
  RT_MAX_SESSIONS: int.min(0).default(0),
  RT_SHED_LAG_MS: int.min(1).default(1000),
  RT_SHED_EVERY_MS: int.min(100).default(1000),
  RT_DEMO_API_KEY: optionalString,
  /** Streaming PocketSphinx decoders per VAD process (0: no streaming, commit → transcribe only); unset = the speakers admission lets in, and a quarter more. */
  RT_STREAM_DECODERS: int.min(0).max(256).optional(),
  /** Streaming decoders loaded when the VAD starts (the rest load on demand, one spare ahead). */
  /** Decoders loaded at start; unset = all of RT_STREAM_DECODERS (test stacks set 2). */
  RT_STREAM_DECODERS_WARM: int.min(0).max(256).optional(),
  /** Partials from an OpenAI-compatible upstream (WORKER_OPENAI_URL) by re-decoding the open item: opt-in, they multiply its requests (docs/realtime.md). */
  RT_UPSTREAM_PARTIALS: bool.default(false),

  // telemetry
  OTEL_EXPORTER_OTLP_ENDPOINT: optionalString,
  OTEL_SERVICE_NAME: z.string().default("stt"),
});

type Env = z.infer<typeof envSchema>;

function deepFreeze<T>(value: T): T {
  if (value && typeof value === "object") {
    for (const v of Object.values(value)) deepFreeze(v);
    Object.freeze(value);
  }
  return value;
}

/**
 * Streaming decoders per VAD process when unset: one for each continuous speaker the
 * engine's share of the machine holds at one speaker's cost (what admission lets in,
 * RT_ADMIT_MAX_ENGINE_SHARE × cores / RT_ENGINE_SPEAKER_CORES), and a quarter more for
 * the decoders still ending a committed utterance as their speaker's next one starts.
 * Sized below the speakers admitted, the rest queue for a decoder at every utterance (20
 * speakers on 16 decoders: no partials for a quarter of the utterances). At most 24 per
 * core (a test stack admits without bound). docs/realtime-reference.md, "Admission and shedding".
 */
function streamDecodersFor(env: Env, cores: number): number {
  const speakers = Math.floor((env.RT_ADMIT_MAX_ENGINE_SHARE * cores) / env.RT_ENGINE_SPEAKER_CORES);
  return Math.min(24 * cores, Math.max(2, speakers + Math.ceil(speakers / 4)));
}

/**
 * `decoders`: the embedded PocketSphinx streaming decoders, when it is the only engine; `redecode`: the open item
 * re-decoded whole through the worker router, for whisper.cpp and (RT_UPSTREAM_PARTIALS) an upstream; null: commit only.
 */
function partialsBy(env: Env, streamDecoders: number): "decoders" | "redecode" | null {
  if (streamDecoders === 0) return null;
  if (env.WHISPER_MODEL_PATH || env.WORKER_OPENAI_URL) return env.WHISPER_MODEL_PATH || env.RT_UPSTREAM_PARTIALS ? "redecode" : null;
  return env.WORKER_EMBEDDED === "pocketsphinx" ? "decoders" : null;
}

function build(env: Env) {
  const streamDecoders = env.RT_STREAM_DECODERS ?? streamDecodersFor(env, availableParallelism());
  return {
    logLevel: env.LOG_LEVEL,
    services: env.STT_SERVICES.split(",").map((s) => s.trim()).filter(Boolean),
    dataDir: env.DATA_DIR,
    supervise: { initialDelayMs: env.SUPERVISE_INITIAL_DELAY_MS, maxCrashes: env.SUPERVISE_MAX_CRASHES, layout: env.STT_LAYOUT },
    shutdown: { timeoutMs: env.SHUTDOWN_TIMEOUT_MS },
    http: { host: env.HOST, port: env.PORT, publicBaseUrl: env.PUBLIC_BASE_URL, metricsPort: env.METRICS_PORT, reusePort: env.STT_REUSE_PORT },
    nats: { url: env.NATS_URL, prefix: env.NATS_PREFIX, replicas: env.NATS_REPLICAS, unhealthyLivenessMs: env.NATS_UNHEALTHY_LIVENESS_MS },
    readiness: { projectionMaxLagMs: env.READINESS_PROJECTION_MAX_LAG_MS },
    db: {
      url: env.DATABASE_URL,
      schema: env.DATABASE_SCHEMA,
      poolMax: env.DATABASE_POOL_MAX,
      statementTimeoutMs: env.DATABASE_STATEMENT_TIMEOUT_MS,
    },
    objects: {
      backend: env.OBJECT_STORE,
      dir: env.OBJECT_STORE_DIR ?? `${env.DATA_DIR}/objects`,
      s3: {
        endpoint: env.S3_ENDPOINT,
        region: env.S3_REGION,
        bucket: env.S3_BUCKET,
        accessKeyId: env.S3_ACCESS_KEY_ID,
        secretAccessKey: env.S3_SECRET_ACCESS_KEY,
        forcePathStyle: env.S3_FORCE_PATH_STYLE,
      },
    },
    auth: {
      adminToken: env.GATEWAY_ADMIN_TOKEN,
      sessionTokenSecret: env.GATEWAY_SESSION_TOKEN_SECRET,
      keyProjectionWaitMs: env.KEY_PROJECTION_WAIT_MS,
      keyCacheTtlMs: env.KEY_CACHE_TTL_MS,
      keyNegativeTtlMs: env.KEY_NEGATIVE_CACHE_TTL_MS,
      failuresPerMinute: env.AUTH_FAILURES_PER_MINUTE,
      trustedProxyHops: env.TRUSTED_PROXY_HOPS,
    },
    gateway: { enabled: env.GATEWAY_ENABLED },
    usage: { windowSeconds: env.USAGE_WINDOW_SECONDS },
    workers: {
      embedded: env.WORKER_EMBEDDED,
      attemptTimeoutMs: env.WORKER_ATTEMPT_TIMEOUT_MS,
      heartbeatMs: env.WORKER_HEARTBEAT_MS,
      whisperModelPath: env.WHISPER_MODEL_PATH,
      openai: env.WORKER_OPENAI_URL
        ? { url: env.WORKER_OPENAI_URL, apiKey: env.WORKER_OPENAI_API_KEY, model: env.WORKER_OPENAI_MODEL, realTimeFactor: env.WORKER_OPENAI_REAL_TIME_FACTOR, concurrency: env.WORKER_OPENAI_CONCURRENCY }
        : undefined,
      fallback: env.FALLBACK_OPENAI_URL
        ? { url: env.FALLBACK_OPENAI_URL, apiKey: env.FALLBACK_OPENAI_API_KEY, model: env.FALLBACK_OPENAI_MODEL, realTimeFactor: env.FALLBACK_REAL_TIME_FACTOR }
        : undefined,
      maxUploadBytes: env.SEGMENT_MAX_UPLOAD_BYTES,
      pieces: { splitMinSeconds: env.SEGMENT_SPLIT_MIN_SECONDS, maxPieceSeconds: env.SEGMENT_PIECE_MAX_SECONDS, minPieceSeconds: env.SEGMENT_PIECE_MIN_SECONDS, inFlight: env.SEGMENT_PIECES_IN_FLIGHT },
      decodeMemoryMaxBytes: env.DECODE_MEMORY_MAX_MB * 1024 * 1024,
      workerId: env.WORKER_ID,
      pocketsphinx: { processes: env.POCKETSPHINX_PROCESSES, realTimeFactor: env.POCKETSPHINX_REAL_TIME_FACTOR },
      whisperRealTimeFactor: env.WHISPER_REAL_TIME_FACTOR,
      whisper: { parallel: env.WHISPER_PARALLEL || undefined, threads: env.WHISPER_THREADS || undefined, fallback: env.WHISPER_TEMPERATURE_FALLBACK, ompWaitPolicy: env.WHISPER_OMP_WAIT_POLICY },
    },
    jobs: {
      fetchMaxBytes: env.JOB_FETCH_MAX_BYTES,
      fetchTimeoutMs: env.JOB_FETCH_TIMEOUT_MS,
      allowPrivateUrls: env.JOB_ALLOW_PRIVATE_URLS,
      fetchConcurrency: env.JOB_FETCH_CONCURRENCY,
      decodeConcurrency: env.JOB_DECODE_CONCURRENCY,
      fetchMinBytesPerSecond: env.JOB_FETCH_MIN_BYTES_PER_SECOND,
      fetchMinRateWindowMs: env.JOB_FETCH_MIN_RATE_WINDOW_MS,
      webhookSigningSecret: env.WEBHOOK_SIGNING_SECRET,
      review: env.REVIEW_LLM_URL
        ? { url: env.REVIEW_LLM_URL, apiKey: env.REVIEW_LLM_API_KEY, model: env.REVIEW_LLM_MODEL, timeoutMs: env.REVIEW_LLM_TIMEOUT_MS }
        : undefined,
      stepAckWaitMs: env.JOB_STEP_ACK_WAIT_MS,
      stepMaxAttempts: env.JOB_STEP_MAX_ATTEMPTS,
      transcribeConcurrency: env.JOB_TRANSCRIBE_CONCURRENCY,
      webhookMaxAttempts: env.JOB_WEBHOOK_MAX_ATTEMPTS,
      webhookBackoffMs: env.JOB_WEBHOOK_BACKOFF_MS,
      webhookTimeoutMs: env.JOB_WEBHOOK_TIMEOUT_MS,
      retentionDays: env.JOB_RETENTION_DAYS,
    },
    realtime: {
      maxFrameBytes: env.RT_MAX_FRAME_BYTES,
      defaultSampleRate: env.RT_DEFAULT_SAMPLE_RATE,
      vadPartitions: env.RT_VAD_PARTITIONS,
      vad: {
        aggressiveness: env.RT_VAD_AGGRESSIVENESS,
        threshold: env.RT_VAD_THRESHOLD,
        silenceMs: env.RT_VAD_SILENCE_MS,
        prefixPaddingMs: env.RT_VAD_PREFIX_PADDING_MS,
        maxUtteranceMs: env.RT_VAD_MAX_UTTERANCE_MS,
      },
      maxPendingAcks: env.RT_MAX_PENDING_ACKS,
      backpressureGraceMs: env.RT_BACKPRESSURE_GRACE_MS,
      maxClientBufferBytes: env.RT_MAX_CLIENT_BUFFER_BYTES,
      leaseTtlMs: env.RT_LEASE_TTL_MS,
      vadLeaseTtlMs: env.RT_VAD_LEASE_TTL_MS,
      transcribeConcurrency: env.RT_TRANSCRIBE_CONCURRENCY,
      maxTranscriptWaitMs: env.RT_MAX_TRANSCRIPT_WAIT_MS,
      admission: {
        maxLoopDelayMs: env.RT_ADMIT_MAX_LOOP_DELAY_MS,
        maxVadLagMs: env.RT_ADMIT_MAX_VAD_LAG_MS,
        maxDecisionMs: env.RT_ADMIT_MAX_DECISION_MS,
        maxEngineShare: env.RT_ADMIT_MAX_ENGINE_SHARE,
        speakerCores: env.RT_ENGINE_SPEAKER_CORES,
        burst: env.RT_ADMIT_BURST,
        maxMachineShare: env.RT_ADMIT_MAX_MACHINE_SHARE,
        plannedSessions: env.RT_ADMIT_SESSIONS_PER_CORE * availableParallelism(), // the gateway's machine stands for the plane's
        settleMs: env.RT_ADMIT_SETTLE_MS,
        maxSessions: env.RT_MAX_SESSIONS,
        shedLagMs: env.RT_SHED_LAG_MS,
        shedAcksMs: env.RT_BACKPRESSURE_GRACE_MS,
        shedEveryMs: env.RT_SHED_EVERY_MS,
      },
      demoApiKey: env.RT_DEMO_API_KEY,
      streamDecoders,
      streamDecodersWarm: env.RT_STREAM_DECODERS_WARM ?? streamDecoders,
      /** How sessions get text while the speaker talks (docs/design/realtime.md, "Partials from engines that decode whole clips"). */
      partials: partialsBy(env, streamDecoders),
      /** Sessions are decoded while spoken (partials, semantic_vad): `partials` is set. */
      streaming: partialsBy(env, streamDecoders) !== null,
    },
    telemetry: { otlpEndpoint: env.OTEL_EXPORTER_OTLP_ENDPOINT, serviceName: env.OTEL_SERVICE_NAME },
  };
}

export type Config = ReturnType<typeof build> & { plans: PlanCatalog };

export class ConfigError extends Error {
  constructor(readonly issues: string[]) {
    super(`invalid configuration:\n  ${issues.join("\n  ")}`);
    this.name = "ConfigError";
  }
}

/**
 * The variables `stt serve` supplies itself when they are unset (services/stt/embedded.ts):
 * the NATS and Postgres addresses (it starts a local nats-server and an embedded
 * Postgres) and three secrets it generates once into DATA_DIR. The CLI asks which are set
 * before it parses the rest; this is the only other read of the environment.
 */
const EMBEDDED_DEFAULTS = ["NATS_URL", "DATABASE_URL", "GATEWAY_ADMIN_TOKEN", "GATEWAY_SESSION_TOKEN_SECRET", "WEBHOOK_SIGNING_SECRET"] as const;
export type EmbeddedDefaultsSet = Partial<Record<(typeof EMBEDDED_DEFAULTS)[number], string>>;

/** Which of the variables with an embedded default are set (non-empty), with their values. */
export function readEmbeddedDefaultsSet(env: Record<string, string | undefined> = process.env): EmbeddedDefaultsSet {
  const out: EmbeddedDefaultsSet = {};
  for (const name of EMBEDDED_DEFAULTS) if (env[name]) out[name] = env[name];
  return out;
}

/**
 * The environment of a child process: this process's, with `overrides` on top. For
 * `stt supervise`, whose `stt serve` children inherit every setting and get what it
 * resolved once (addresses, secrets, their group of services) added.
 */
export function childEnvironment(overrides: Record<string, string> = {}, env: Record<string, string | undefined> = process.env): Record<string, string | undefined> {
  return { ...env, ...overrides };
}

/**
 * Parses the environment into the frozen Config. `overrides` lets tests and the CLI
 * set variables without touching process.env.
 */
export function loadConfig(
  env: Record<string, string | undefined> = process.env,
  overrides: Record<string, string | undefined> = {},
): Config {
  const merged = { ...env, ...overrides };
  const parsed = envSchema.safeParse(merged);
  if (!parsed.success) {
    throw new ConfigError(parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`));
  }
  let plans: PlanCatalog;
  try {
    plans = loadPlanCatalog(parsed.data.PLANS_FILE);
  } catch (err) {
    throw new ConfigError([(err as Error).message]);
  }
  return deepFreeze({ ...build(parsed.data), plans });
}
