import uWS, { type us_listen_socket, type WebSocket } from "@trufflesuite/uws-js-unofficial";
import { createAudioBatcher } from "./audio-publisher";
import { randomBytes } from "node:crypto";
import { REALTIME_PATH, type TurnDetection } from "../../schemas/realtime";
import { closeFor, upstreamAvailable } from "../../domain/sessions/close-rules";
import type { SessionStore } from "../../domain/sessions/store";
import type { Principal } from "../../domain/keys/auth";
import { startConfiguredKeyCache, type KeyCache } from "../../domain/keys/key-cache";
import type { KeyStore } from "../../domain/keys/store";
import type { UsageStore } from "../../domain/usage/store";
import type { Limits } from "../../schemas/plans";
import type { Config } from "../../shared/config";
import type { Db } from "../../shared/db/index";
import { websocketRequired, writeRefusal } from "./upgrade-refusal";
import type { Logger } from "../../shared/logger";
import type { Nats } from "../../shared/nats";
import type { WorkerRouter } from "../../shared/workers/types";
import { handleDemoRoutes } from "./demo";
import { watchGatewayFlag } from "./gateway-flag";
import { bridgeToFetch, type FetchHandler } from "./http-bridge";
import { bindWithin, listenErrorCode } from "../../shared/listen";
import { createLeases } from "./leases";
import type { Session } from "./session";
import { endQuietly, socketBehavior, type SocketContext, type SocketData } from "./sockets";
import { createResumes } from "./resume";
import { OPENAI_REALTIME_PATH } from "../../schemas/openai-realtime";
import { createHeadroom, newestOpen } from "./headroom";

/**
 * The realtime gateway: one uWebSockets.js listener serving the WebSocket
 * /v1/audio/transcriptions/stream, the OpenAI Realtime door /v1/realtime (the same
 * sessions in OpenAI's protocol: openai-door.ts), the demo page, and (through the bridge) every other
 * HTTP route of the hono app, so the whole service lives under one base URL.
 */
export interface RealtimeContext {
  config: Config;
  nats: Nats;
  /** The sessions store (rt.evt's one writer): each session's opened and closed facts. */
  sessions: SessionStore;
  db: Db;
  logger: Logger;
  router?: WorkerRouter;
  keys: KeyStore;
  usage: UsageStore;
}

export interface RealtimeGatewayOptions {
  /** The HTTP app (hono `app.fetch`); without it plain HTTP gets 404 except the stream path. */
  fetch?: FetchHandler;
  host?: string;
  /** 0 picks a free port. Default: config.http.port. */
  port?: number;
  gatewayId?: string;
  /** The process's key cache and revocation feed (default: the gateway starts its own). */
  keyCache?: KeyCache;
  /** Plan limits of a principal (default: the plan catalog's). Embedders and tests may tighten them. */
  limitsFor?: (principal: Principal) => Limits;
  now?: () => Date;
}

export interface RealtimeGateway {
  port: number;
  gatewayId: string;
  openSessions(): number;
  /** Readiness: would an upgrade be admitted now (switch, upstream)? */
  status(): { ok: boolean; detail: string };
  /** Stops listening and closes open sessions with 1013 upstream_unavailable (try again elsewhere). */
  stop(): Promise<void>;
}

const SWEEP_MS = 250;
/** How long a stop waits for its sessions' holds (their audio stored, ownership written) before it goes on. */
const HOLD_AT_STOP_MS = 3000;
// uSockets' listen options (the package's `ListenOptions` enum is types only)
const LIBUS_LISTEN_DEFAULT = 0;
const LIBUS_LISTEN_EXCLUSIVE_PORT = 1;

export async function startRealtimeGateway(ctx: RealtimeContext, options: RealtimeGatewayOptions = {}): Promise<RealtimeGateway> {
  const { config, nats, logger } = ctx;
  const rt = config.realtime;
  const gatewayId = options.gatewayId ?? `gw_${randomBytes(6).toString("hex")}`;
  const log = logger.child({ component: "realtime-gateway", gatewayId });
  const now = options.now ?? (() => new Date());
  // read on every frame: without an injected clock, no Date object each time
  const nowMs = options.now ? () => options.now!().getTime() : Date.now;
  const flag = await watchGatewayFlag(await nats.kv("flags"));
  const leasesKv = await nats.kv("leases");
  const leases = createLeases(leasesKv, gatewayId, rt.leaseTtlMs);
  const keyCache = options.keyCache ?? (await startConfiguredKeyCache({ nats, db: ctx.db, config, logger: log }));
  const limitsFor = options.limitsFor ?? ((p: Principal) => p.limits);
  const defaultTurnDetection: TurnDetection = {
    type: "server_vad",
    threshold: rt.vad.threshold,
    prefix_padding_ms: rt.vad.prefixPaddingMs,
    silence_duration_ms: rt.vad.silenceMs,
    aggressiveness: rt.vad.aggressiveness,
    max_utterance_ms: rt.vad.maxUtteranceMs,
  };
  const sessions = new Set<Session>();
  // batch msg ids must not repeat after a restart within the stream's duplicate window
  const instanceId = `${gatewayId.replace(/[^A-Za-z0-9_-]/g, "_")}-${randomBytes(4).toString("hex")}`;
  const audio = createAudioBatcher({
    js: nats.js,
    subject: (p) => nats.topology.subjects.rtAudio(p, instanceId),
    instanceId,
    maxPendingAcks: rt.maxPendingAcks,
    now: nowMs,
  });

  const headroom = createHeadroom({ nats, thresholds: rt.admission, acksOverloadedMs: (at) => audio.overloadedForMs(at), openSessions: () => sessions.size, logger: log });
  const admitDeps = { ...ctx, flag, leases, keyCache, limitsFor, headroom, now };
  const resumes = createResumes({ ...admitDeps, kv: leasesKv, gatewayId, open: sessions, audio, partitions: rt.vadPartitions }, leases, log);

  // A revoked key's sessions end at once (1008 key_revoked), and those held for a resume
  // end too: every gateway follows the key stream, so each ends its own within the
  // event's delivery time.
  const unwatchRevocations = keyCache.onRevoked((keyId) => {
    resumes.revoked(keyId);
    let closed = 0;
    for (const s of sessions) {
      if (s.keyId !== keyId) continue;
      s.revoke();
      closed++;
    }
    if (closed > 0) log.info("closed the sessions of a revoked key", { keyId, sessions: closed });
  });

  const app = uWS.App();
  const sessionDeps = {
    nats,
    usage: ctx.usage,
    sessions: ctx.sessions,
    logger: log,
    gatewayId,
    partitions: rt.vadPartitions,
    maxFrameBytes: rt.maxFrameBytes,
    audio,
    backpressureGraceMs: rt.backpressureGraceMs,
    maxClientBufferBytes: rt.maxClientBufferBytes,
    defaultTurnDetection,
    streaming: rt.streaming,
    now: nowMs,
    onClosed: (s: Session) => {
      sessions.delete(s);
      headroom.closed();
    },
    onDecision: (ms: number) => headroom.decided(ms),
  };
  const sockets = new Set<WebSocket<SocketData>>();
  const socketContext: SocketContext = { rt, admitDeps, resumes, log, defaultTurnDetection, nowMs, sockets, sessionDeps, opened: (s) => sessions.add(s) };
  app.ws<SocketData>(REALTIME_PATH, socketBehavior("native", socketContext));
  app.ws<SocketData>(OPENAI_REALTIME_PATH, socketBehavior("openai", socketContext));

  serveHttp(app, { config, db: ctx.db, now, fetch: options.fetch, log });

  const host = options.host ?? config.http.host;
  const listenSocket = await listen(app, host, options.port ?? config.http.port, config, log);
  const port = uWS.us_socket_local_port(listenSocket);

  const sweep = setInterval(() => {
    const t = nowMs();
    // Mid-session, only an open breaker or a NATS outage past NATS_OUTAGE_CLOSE_MS closes
    // sessions (close-rules.ts `upstreamAvailable`).
    const router = ctx.router;
    const nh = nats.health();
    const natsDownForMs = nh.ok ? null : Date.now() - (nh.since ?? Date.now());
    const upstream = upstreamAvailable(natsDownForMs, router ? { available: router.available(), retryAfterSeconds: router.retryAfterSeconds() } : null);
    for (const s of sessions) s.tick(t, upstream);
    // Past capacity despite admission (load grew after it): give back the newest
    // session, one at a time, never the ones admitted while there was headroom.
    if (upstream && nh.ok && headroom.shedNow(t)) newestOpen(sessions)?.shed();
  }, SWEEP_MS);

  log.info("realtime gateway listening", { host, port });
  let stopped = false;
  return {
    port,
    gatewayId,
    openSessions: () => sessions.size,
    status: () => {
      if (!config.gateway.enabled) return { ok: false, detail: "gateway disabled (GATEWAY_ENABLED)" };
      if (flag.disabled()) return { ok: false, detail: "gateway disabled by the operator switch" };
      if (ctx.router && !ctx.router.available()) return { ok: false, detail: "upstream unavailable (no warm worker or breaker open)" };
      return { ok: true, detail: `accepting; ${sessions.size} open session${sessions.size === 1 ? "" : "s"}` };
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      clearInterval(sweep);
      headroom.stop();
      uWS.us_listen_socket_close(listenSocket);
      // a restart: a session that can be resumed is held and its client told so (1012); the rest close 1013
      for (const ws of [...sockets]) {
        const s = ws.getUserData().session;
        if (s) s.stopping(nats.health().ok);
        else endQuietly(ws, closeFor("gateway_stopping"));
      }
      // let close handlers release leases and flush usage, and the holds settle their audio
      await Promise.all([new Promise((r) => setTimeout(r, 100)), Promise.race([resumes.holding(), new Promise((r) => setTimeout(r, HOLD_AT_STOP_MS))])]);
      await audio.stop();
      resumes.stop();
      leases.stop();
      flag.stop();
      unwatchRevocations();
      if (!options.keyCache) await keyCache.stop();
    },
  };
}

/**
 * Listens on host:port: exclusively unless config.http.reusePort (uWS listens with
 * SO_REUSEPORT unless told LIBUS_LISTEN_EXCLUSIVE_PORT: a second instance on the port
 * would start "fine" and the kernel would split connections between the two); a port
 * in use is waited for up to the shutdown timeout (a restarting predecessor).
 */
async function listen(app: uWS.TemplatedApp, host: string, wantedPort: number, config: Config, log: Logger): Promise<us_listen_socket> {
  // The native listen takes (host, port, options, cb); the package's types only declare (port, options, cb).
  const listenWith = app.listen as unknown as (host: string, port: number, options: number, cb: (s: us_listen_socket | false) => void) => void;
  const listenOptions = config.http.reusePort ? LIBUS_LISTEN_DEFAULT : LIBUS_LISTEN_EXCLUSIVE_PORT;
  const listenOnce = async (): Promise<us_listen_socket | false> => {
    const socket = await new Promise<us_listen_socket | false>((resolve) => listenWith.call(app, host, wantedPort, listenOptions, resolve));
    if (socket) return socket;
    const code = await listenErrorCode(host, wantedPort);
    if (code && code !== "EADDRINUSE") throw new Error(`cannot listen on ${host}:${wantedPort}: ${code}`);
    return false;
  };
  return bindWithin(listenOnce, { host, port: wantedPort, waitMs: config.shutdown.timeoutMs, logger: log });
}

/** Plain HTTP on the gateway's port: the stream paths answer 426, the demo page, and every other route through the bridge to the hono app (404 without one). */
function serveHttp(app: uWS.TemplatedApp, o: { config: Config; db: Db; now: () => Date; fetch?: FetchHandler; log: Logger }) {
  const onHandlerError = (err: unknown) => o.log.error("http handler failed", { error: (err as Error)?.message ?? String(err), stack: (err as Error)?.stack });
  app.any("/*", (res, req) => {
    // A throw out of a uWS handler ends the process: every path is guarded.
    try {
      const url = req.getUrl();
      if (url === REALTIME_PATH || url === OPENAI_REALTIME_PATH) return void writeRefusal(res, websocketRequired(url));
      if (handleDemoRoutes(res, req, { config: o.config, db: o.db, now: o.now })) return;
      if (!o.fetch) {
        res.writeStatus("404 Not Found").writeHeader("content-type", "application/json");
        return void res.end(JSON.stringify({ error: { message: `No route for ${req.getMethod().toUpperCase()} ${url}`, type: "invalid_request_error", code: "not_found" } }));
      }
      bridgeToFetch(o.fetch, res, req, onHandlerError);
    } catch (err) {
      onHandlerError(err);
      try {
        res.writeStatus("500 Internal Server Error").writeHeader("content-type", "application/json");
        res.end(JSON.stringify({ error: { message: "internal error", type: "server_error", code: "internal_error", param: null } }), true);
      } catch {
        // already answered or aborted
      }
    }
  });
}
