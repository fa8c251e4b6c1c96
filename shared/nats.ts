import { connect, type NatsConnection } from "@nats-io/transport-node";
import {
  jetstream,
  jetstreamManager,
  AckPolicy,
  DeliverPolicy,
  DiscardPolicy,
  RetentionPolicy,
  StorageType,
  type JetStreamClient,
  type JetStreamManager,
} from "@nats-io/jetstream";
import { Kvm, type KV } from "@nats-io/kv";
import { AppError } from "./errors";
import { installNatsPatches } from "./nats-patches";

/**
 * NATS adapter: the connection, the JetStream topology declared as data, and
 * idempotent creation of streams, durable consumers and KV buckets.
 *
 * Every stream, subject and bucket carries the configured prefix, so tests (and
 * several deployments on one NATS) never collide: prefix "stt" gives stream
 * STT_JOBS with subjects stt.job.evt.<jobId>.
 */
export interface Nats {
  nc: NatsConnection;
  js: JetStreamClient;
  jsm: JetStreamManager;
  topology: Topology;
  /**
   * A bucket handle, created on first use. Operations that find the bucket gone (a
   * nats-server restart drops the memory-backed ones) re-create it and retry once;
   * when NATS itself does not answer they throw 503 `nats_unavailable`.
   */
  kv(bucket: keyof Topology["buckets"]): Promise<KV>;
  /**
   * Registers `hook` to run after every reconnect, once the streams and the buckets
   * opened so far are declared again: re-open watches, re-ensure consumers. A hook that
   * throws makes the whole recovery retry with backoff (hooks must be idempotent).
   * Returns the unregister function.
   */
  onReconnect(hook: () => Promise<void> | void): () => void;
  /** Whether this connection is up with its resources declared; for /readyz and /health. */
  health(): NatsHealth;
  close(): Promise<void>;
}

export interface NatsHealth {
  /** Connected, and everything re-declared since the last reconnect. */
  ok: boolean;
  /** Epoch ms when the current unhealthy spell began (absent when ok). */
  since?: number;
  /** Why it is not ok. */
  reason?: string;
}

interface StreamSpec {
  name: string;
  subjects: string[];
  /** 0 = forever */
  maxAgeMs: number;
  storage: "file" | "memory";
  duplicateWindowMs: number;
  maxMsgSize?: number;
  maxBytes?: number;
}

export interface ConsumerSpec {
  stream: string;
  durable: string;
  filterSubject?: string;
  ackWaitMs: number;
  maxDeliver: number;
  maxAckPending: number;
  /** Where a new durable starts; "all" replays the stream. */
  deliver: "all" | "new";
}

interface BucketSpec {
  name: string;
  /** 0 = forever; entries older than this are removed by the server. */
  ttlMs: number;
  history: number;
  storage: "file" | "memory";
}

const MINUTE = 60_000;
const DAY = 24 * 60 * MINUTE;

/** Streams, subjects and buckets for one prefix. */
export function topology(prefix: string) {
  const P = prefix.toUpperCase();
  const s = (rest: string) => `${prefix}.${rest}`;
  const streams = {
    keys: { name: `${P}_KEYS`, subjects: [s("key.evt.>")], maxAgeMs: 0, storage: "file", duplicateWindowMs: 2 * MINUTE },
    jobs: { name: `${P}_JOBS`, subjects: [s("job.evt.>"), s("job.cmd.>")], maxAgeMs: 30 * DAY, storage: "file", duplicateWindowMs: 10 * MINUTE },
    usage: { name: `${P}_USAGE`, subjects: [s("usage.evt.>")], maxAgeMs: 400 * DAY, storage: "file", duplicateWindowMs: 10 * MINUTE },
    segments: { name: `${P}_SEGMENTS`, subjects: [s("segment.evt.>")], maxAgeMs: 30 * DAY, storage: "file", duplicateWindowMs: 2 * MINUTE },
    rtAudio: { name: `${P}_RT_AUDIO`, subjects: [s("rt.audio.>")], maxAgeMs: 10 * MINUTE, storage: "file", duplicateWindowMs: 2 * MINUTE, maxMsgSize: 1024 * 1024 + 4096 },
    rtEvents: { name: `${P}_RT_EVENTS`, subjects: [s("rt.evt.>"), s("rt.cmd.>")], maxAgeMs: 3 * DAY, storage: "file", duplicateWindowMs: 2 * MINUTE },
  } satisfies Record<string, StreamSpec>;
  const buckets = {
    workers: { name: `${P}_workers`, ttlMs: 30_000, history: 1, storage: "memory" },
    rate: { name: `${P}_rate`, ttlMs: 2 * MINUTE, history: 1, storage: "memory" },
    leases: { name: `${P}_leases`, ttlMs: 10 * MINUTE, history: 1, storage: "memory" },
    flags: { name: `${P}_flags`, ttlMs: 0, history: 1, storage: "file" },
    /** Live audio budget per key and billing window (domain/usage/budget.ts). */
    budget: { name: `${P}_budget`, ttlMs: 2 * DAY, history: 1, storage: "file" },
  } satisfies Record<string, BucketSpec>;
  return {
    prefix,
    streams,
    buckets,
    subjects: {
      keyEvent: (keyId: string) => s(`key.evt.${keyId}`),
      keyEvents: s("key.evt.>"),
      jobEvent: (jobId: string) => s(`job.evt.${jobId}`),
      jobEvents: s("job.evt.>"),
      jobCommand: (step: string, jobId: string) => s(`job.cmd.${step}.${jobId}`),
      jobCommands: (step: string) => s(`job.cmd.${step}.>`),
      usageEvent: (keyId: string) => s(`usage.evt.${keyId}`),
      usageEvents: s("usage.evt.>"),
      segmentEvent: (keyId: string) => s(`segment.evt.${keyId}`),
      rtAudio: (partition: number, sessionId: string) => s(`rt.audio.${partition}.${sessionId}`),
      rtAudioPartition: (partition: number) => s(`rt.audio.${partition}.>`),
      rtEvent: (sessionId: string) => s(`rt.evt.${sessionId}`),
      rtEvents: s("rt.evt.>"),
      rtCommand: (sessionId: string) => s(`rt.cmd.${sessionId}`),
      /** Core NATS request/reply to one realtime gateway about a session it drives or holds (realtime-gateway/resume.ts). */
      rtGateway: (gatewayId: string, verb: "yield" | "taken") => s(`rt.gw.${gatewayId}.${verb}`),
      /** Core NATS (not JetStream): live push of session events to the owning gateway. */
      rtLive: (sessionId: string) => s(`rt.live.${sessionId}`),
      /** Core NATS request/reply: the embedded workers' queue group subject. */
      workerRequest: (workerId: string) => s(`worker.req.${workerId}`),
      workerAny: s("worker.req.any"),
    },
  };
}
export type Topology = ReturnType<typeof topology>;

function toStreamConfig(spec: StreamSpec, replicas: number) {
  return {
    name: spec.name,
    subjects: spec.subjects,
    retention: RetentionPolicy.Limits,
    storage: spec.storage === "file" ? StorageType.File : StorageType.Memory,
    max_age: spec.maxAgeMs * 1_000_000,
    duplicate_window: spec.duplicateWindowMs * 1_000_000,
    num_replicas: replicas,
    discard: DiscardPolicy.Old,
    allow_direct: true,
    ...(spec.maxMsgSize ? { max_msg_size: spec.maxMsgSize } : {}),
    ...(spec.maxBytes ? { max_bytes: spec.maxBytes } : {}),
  };
}

/** Creates or updates every stream of the topology; safe to call on every start. */
async function ensureStreams(jsm: JetStreamManager, specs: StreamSpec[], replicas = 1): Promise<void> {
  for (const spec of specs) {
    const config = toStreamConfig(spec, replicas);
    try {
      await jsm.streams.info(spec.name);
      await jsm.streams.update(spec.name, config);
    } catch (err) {
      if (!isNotFound(err)) throw err;
      await jsm.streams.add(config);
    }
  }
}

/** Creates or updates a durable pull consumer; safe to call on every start. */
export async function ensureConsumer(jsm: JetStreamManager, spec: ConsumerSpec): Promise<void> {
  const config = {
    durable_name: spec.durable,
    ack_policy: AckPolicy.Explicit,
    ack_wait: spec.ackWaitMs * 1_000_000,
    max_deliver: spec.maxDeliver,
    max_ack_pending: spec.maxAckPending,
    deliver_policy: spec.deliver === "all" ? DeliverPolicy.All : DeliverPolicy.New,
    ...(spec.filterSubject ? { filter_subject: spec.filterSubject } : {}),
  };
  try {
    await jsm.consumers.info(spec.stream, spec.durable);
    const { deliver_policy: _ignored, ...updatable } = config;
    await jsm.consumers.update(spec.stream, spec.durable, updatable);
  } catch (err) {
    if (!isNotFound(err)) throw err;
    await jsm.consumers.add(spec.stream, config);
  }
}

/**
 * Errors that mean a stream (or bucket) the operation needs is not there: after a
 * nats-server restart a memory-backed bucket is gone, a publish to its subjects gets
 * no responders (reported as "jetstream is not enabled") and an info "stream not found".
 */
function isMissingResource(err: unknown): boolean {
  const e = err as { name?: string; message?: string; cause?: { name?: string } };
  const text = `${e?.name ?? ""} ${e?.message ?? ""} ${e?.cause?.name ?? ""}`;
  return /stream not found|StreamNotFound|no responders|NoResponders|jetstream is not enabled|JetStreamNotEnabled/i.test(text);
}

/** A request that got no answer in time, or a connection that is down or closed. */
function isConnectionTrouble(err: unknown): boolean {
  const e = err as { name?: string; message?: string; code?: unknown };
  return /TimeoutError|ClosedConnection|Disconnect/i.test(e?.name ?? "") || /^timeout$|connection (closed|draining)|disconnected/i.test(e?.message ?? "");
}

export function isNotFound(err: unknown): boolean {
  const e = err as { code?: unknown; api_error?: { err_code?: number; code?: number }; message?: string };
  const code = e?.api_error?.code ?? e?.code;
  return code === 404 || code === "404" || /not found/i.test(e?.message ?? "");
}

export interface ConnectOptions {
  url: string;
  prefix: string;
  replicas?: number;
  name?: string;
  /** Create streams and buckets (the default); false only attaches. */
  declare?: boolean;
}

/** Async KV operations that may need their bucket re-created (the rest are local). */
const KV_OPERATIONS = new Set(["get", "put", "create", "update", "delete", "purge", "status", "watch", "keys", "history"]);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Connects, declares the topology idempotently and returns the adapter.
 *
 * A nats-server restart is healed here, not by restarting the process: the client
 * reconnects forever (every 500 ms), and after each reconnect the streams and every
 * bucket opened so far are declared again (memory-backed buckets such as `workers`,
 * `rate` and `leases` come back empty), then the `onReconnect` hooks run (watches,
 * consumers). Until that has succeeded `health()` says why not, and since when.
 */
export async function connectNats(options: ConnectOptions): Promise<Nats> {
  installNatsPatches();
  const nc = await connect({
    servers: options.url.split(","),
    name: options.name ?? "stt",
    maxReconnectAttempts: -1,
    reconnectTimeWait: 500,
    // Every JetStream publish is a request; with async traces on, each one builds two
    // error objects with captured stacks up front (RequestError, TimeoutError) in case it
    // fails: 14% of the realtime plane's CPU at 300 sessions (bench/realtime.ts
    // --cpu-prof). Errors still say what timed out, without the caller's stack.
    noAsyncTraces: true,
  });
  const js = jetstream(nc);
  const jsm = await jetstreamManager(nc);
  const top = topology(options.prefix);
  const replicas = options.replicas ?? 1;
  const declareStreams = () => ensureStreams(jsm, Object.values(top.streams), replicas);
  if (options.declare !== false) await declareStreams();
  const kvm = new Kvm(nc);
  const specByName = new Map<string, BucketSpec>(Object.values(top.buckets).map((b: BucketSpec) => [b.name, b]));
  const createBucket = (spec: BucketSpec) =>
    kvm.create(spec.name, {
      ttl: spec.ttlMs,
      history: spec.history,
      storage: spec.storage === "file" ? StorageType.File : StorageType.Memory,
      replicas,
    });

  let state: NatsHealth = { ok: true };
  let connected = true;
  const unhealthy = (reason: string) => (state = { ok: false, since: state.since ?? Date.now(), reason });

  /**
   * Runs `op`; when it fails because the bucket is gone, re-creates the bucket and runs
   * it once more. A timeout is ambiguous (a direct get on a missing bucket times out
   * too), so the bucket's existence is checked before deciding.
   */
  const healing = async <T>(spec: BucketSpec, what: string, op: () => Promise<T>): Promise<T> => {
    // Fail fast while disconnected: the request would only wait out its 5 s timeout.
    if (!connected) throw natsUnavailable(new Error("disconnected, reconnecting"), `${spec.name} ${what}`);
    try {
      return await op();
    } catch (err) {
      let missing = isMissingResource(err);
      if (!missing && isConnectionTrouble(err) && !nc.isClosed()) {
        missing = await jsm.streams.info(`KV_${spec.name}`).then(() => false, (e) => isNotFound(e));
      }
      if (!missing) throw isConnectionTrouble(err) ? natsUnavailable(err, `${spec.name} ${what}`) : err;
      await createBucket(spec).catch((e) => {
        throw natsUnavailable(e, `re-creating bucket ${spec.name}`);
      });
      return await op().catch((e) => {
        throw natsUnavailable(e, `${spec.name} ${what}`);
      });
    }
  };

  const opened = new Map<string, Promise<KV>>();
  const kv = (bucket: keyof Topology["buckets"]) => {
    const spec: BucketSpec = top.buckets[bucket];
    let p = opened.get(spec.name);
    if (!p) {
      p = createBucket(spec).then((handle) => selfHealing(handle, spec));
      p.catch(() => opened.delete(spec.name));
      opened.set(spec.name, p);
    }
    return p;
  };
  const selfHealing = (handle: KV, spec: BucketSpec): KV =>
    new Proxy(handle, {
      get(target, prop, receiver) {
        const value = Reflect.get(target, prop, receiver);
        if (typeof prop !== "string" || typeof value !== "function" || !KV_OPERATIONS.has(prop)) return value;
        return (...args: unknown[]) => healing(spec, prop, () => (value as (...a: unknown[]) => Promise<unknown>).apply(target, args));
      },
    });

  const hooks = new Set<() => Promise<void> | void>();
  let generation = 0;
  /** Declares everything again after a reconnect, retrying with backoff until it holds. */
  const recover = async () => {
    const mine = ++generation;
    let backoff = 250;
    while (mine === generation && !nc.isClosed()) {
      try {
        if (options.declare !== false) await declareStreams();
        for (const name of opened.keys()) await createBucket(specByName.get(name)!);
        for (const hook of [...hooks]) await hook();
        if (mine === generation) state = { ok: true };
        return;
      } catch (err) {
        unhealthy(`re-declaring NATS resources after a reconnect failed: ${(err as Error)?.message ?? err}`);
        await sleep(backoff);
        backoff = Math.min(backoff * 2, 5000);
      }
    }
  };
  void (async () => {
    for await (const s of nc.status()) {
      if (s.type === "disconnect") {
        connected = false;
        generation++; // abandon a recovery in progress; the next reconnect starts one
        unhealthy("disconnected from NATS, reconnecting");
      } else if (s.type === "reconnect") {
        connected = true;
        unhealthy("reconnected to NATS, re-declaring streams and buckets");
        void recover();
      }
    }
  })().catch(() => undefined);

  return {
    nc,
    js,
    jsm,
    topology: top,
    kv,
    onReconnect: (hook) => {
      hooks.add(hook);
      return () => void hooks.delete(hook);
    },
    health: () => (nc.isClosed() ? { ok: false, since: state.since ?? Date.now(), reason: "the NATS connection is closed" } : state),
    close: async () => {
      generation++;
      await nc.drain().catch(() => nc.close());
    },
  };
}

function natsUnavailable(err: unknown, what: string): AppError {
  if (err instanceof AppError) return err;
  return new AppError("unavailable", "nats_unavailable", `NATS did not serve ${what}: ${(err as Error)?.message ?? String(err)}`, { cause: err });
}

/** Deletes every stream and bucket of a prefix: for tests cleaning up after themselves. */
export async function destroyTopology(nats: Nats): Promise<void> {
  const { streams, buckets } = nats.topology;
  for (const spec of Object.values(streams)) await nats.jsm.streams.delete(spec.name).catch(() => undefined);
  for (const spec of Object.values(buckets)) await nats.jsm.streams.delete(`KV_${spec.name}`).catch(() => undefined);
}
