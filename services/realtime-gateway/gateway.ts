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
import { clientAddress } from "../../shared/auth-throttle";
import { AppError, toAppError } from "../../shared/errors";
import { websocketRequired, writeRefusal } from "./upgrade-refusal";
import type { Logger } from "../../shared/logger";
import type { Nats } from "../../shared/nats";
import type { WorkerRouter } from "../../shared/workers/types";
import { protocolToAnswer } from "../../domain/keys/upgrade-credentials";
import { admit, type Admission } from "./admit";
import { handleDemoRoutes } from "./demo";
import { watchGatewayFlag } from "./gateway-flag";
import { bridgeToFetch, type FetchHandler } from "./http-bridge";
import { bindWithin, listenErrorCode } from "../../shared/listen";
import { createLeases } from "./leases";
import { openSession, type Session } from "./session";
import type { SessionSocket, SessionStart } from "./session-io";
import { createResumes } from "./resume";
import { resumeRequestOf } from "./resume-reads";
import { OPENAI_MAX_TEXT_FRAME_BYTES, OPENAI_REALTIME_PATH, type DoorRecord } from "../../schemas/openai-realtime";
import { createOpenAiDoor, doorAdmission, newDoorStart, readOpenAiUpgrade, type DoorStart, type OpenAiDoor, type OpenAiUpgrade } from "./openai-door";
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

interface SocketData {
  admission: Admission;
  /** A resumed session's start (resume.ts); absent for a new session. */
  start?: SessionStart;
  session?: Session;
  /** The OpenAI door's upgrade (`/v1/realtime`); absent on the native door. */
  openai?: OpenAiUpgrade;
  /** The OpenAI door's state to start from (new, or stored for a resume). */
  doorStart?: DoorStart;
  door?: OpenAiDoor;
}
type Door = "native" | "openai";

const SWEEP_MS = 250;
/** How long a stop waits for its sessions' holds (their audio stored, ownership written) before it goes on. */
const HOLD_AT_STOP_MS = 3000;
const MAX_WIRE_FRAME_BYTES = 16 * 1024 * 1024;
// uSockets' listen options (the package's `ListenOptions` enum is types only)
const LIBUS_LISTEN_DEFAULT = 0;
const LIBUS_LISTEN_EXCLUSIVE_PORT = 1;

/** Closes a socket that may already be closed (uWS throws on a closed one). */
function endQuietly(ws: WebSocket<SocketData>, { code, reason }: { code: number; reason: string }): void {
  try {
    ws.end(code, reason);
  } catch {
    // already closed
  }
}

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
  const sockets = new Set<WebSocket<SocketData>>();
  // batch msg ids must not repeat after a restart within the stream's duplicate window
  const instanceId = `${gatewayId.replace(/[^A-Za-z0-9_-]/g, "_")}-${randomBytes(4).toString("hex")}`;
  const audio = createAudioBatcher({
    js: nats.js,
    subject: (p) => nats.topology.subjects.rtAudio(p, instanceId),
    instanceId,
    maxPendingAcks: rt.maxPendingAcks,
    now: nowMs,
  });

  const headroom = createHeadroom({ nats, thresholds: rt.admission, acksOverloadedMs: (at) => audio.overloadedForMs(at), logger: log });
  const admitDeps = { ...ctx, flag, leases, keyCache, limitsFor, headroom, openSessions: () => sessions.size, now };
  const resumes = createResumes({ ...admitDeps, kv: leasesKv, gatewayId, open: sessions, audio, partitions: rt.vadPartitions }, leases, log);

  const openSocketSession = (ws: WebSocket<SocketData>, data: SocketData) => {
    const raw = { send: (text: string) => ws.send(text, false), bufferedAmount: () => ws.getBufferedAmount(), end: (code: number, reason: string) => ws.end(code, reason) };
    let socket: SessionSocket = { ...raw, send: (event) => raw.send(JSON.stringify(event)) };
    let admission = data.admission;
    if (data.openai) {
      // the OpenAI door: its events in, OpenAI's out, over the same session (openai-door.ts)
      const { openai, doorStart } = data;
      const start = doorStart ?? newDoorStart(openai, admission, defaultTurnDetection, nowMs());
      const persist = (record: DoorRecord) => resumes.doorChanged(admission.sessionId, record);
      data.door = createOpenAiDoor(raw, admission, { upgrade: openai, vad: defaultTurnDetection, maxFrameBytes: rt.maxFrameBytes, preset: admission.presetSession, start, persist });
      const refused = data.door.refusal();
      if (refused) return endQuietly(ws, refused);
      socket = data.door.sessionSocket;
      admission = doorAdmission(admission);
    }
    const session = openSession(
      admission,
      socket,
      {
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
        onClosed: (s) => sessions.delete(s),
        onLost: (s, code) => void resumes.hold(s, code).catch((err) => log.warn("holding a session failed", { error: (err as Error).message })),
        onDecision: (ms) => headroom.decided(ms),
      },
      data.start ?? { kind: "new", offer: resumes.offerFor(admission) },
    );
    data.session = session;
    sessions.add(session);
    data.door?.attach(session);
    // revoked between its admission and now: the feed's close already passed it by
    if (keyCache.isRevoked(session.keyId)) setImmediate(() => session.revoke());
  };

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
  const socketBehavior = (door: Door): uWS.WebSocketBehavior<SocketData> => ({
    // uWS drops a frame over maxPayloadLength with a bare TCP close (1006 at the client):
    // accept up to 16 MiB and close 1009 frame_too_large ourselves above config (1 MiB;
    // the OpenAI door: its text frames up to OPENAI_MAX_TEXT_FRAME_BYTES, base64 audio).
    // uWS buffers a frame until it is whole, so this bounds memory per socket too.
    maxPayloadLength: door === "openai" ? OPENAI_MAX_TEXT_FRAME_BYTES + 1024 * 1024 : Math.max(MAX_WIRE_FRAME_BYTES, rt.maxFrameBytes + 1024),
    maxBackpressure: rt.maxClientBufferBytes + 1024 * 1024,
    idleTimeout: 120,
    sendPingsAutomatically: true,
    compression: uWS.DISABLED,
    upgrade: (res, req, context) => {
      let aborted = false;
      res.onAborted(() => {
        aborted = true;
      });
      const key = req.getHeader("sec-websocket-key");
      const protocol = req.getHeader("sec-websocket-protocol");
      const openai = door === "openai" ? readOpenAiUpgrade(req.getQuery() ?? "", protocol, req.getHeader("openai-beta")) : undefined;
      // permessage-deflate is declined (compression is DISABLED): PCM barely compresses
      // and inflating every frame would cost CPU per session.
      const extensions = "";
      const source = clientAddress(Buffer.from(res.getRemoteAddressAsText()).toString(), req.getHeader("x-forwarded-for"), config.auth.trustedProxyHops);
      const request = { authorization: req.getHeader("authorization"), protocols: protocol, query: req.getQuery() ?? "", source };
      // Not corked: uWS 20.30's HttpResponse.cork uncorks the old HTTP socket after the
      // handler, and an upgrade inside it frees that socket first. In the bench that
      // dropped other, already open WebSockets (1006, server FIN; up to half of 150
      // back-to-back upgrades); uncorked, none in 600. The price is a native
      // "writes must be made from within a corked callback" warning on stderr per upgrade.
      // an OpenAI upgrade the door refuses (its ?intent) is never a resume: it must not take the session
      const resume = openai && openai.intent !== null && openai.intent !== "transcription" ? null : resumeRequestOf(request.query);
      // a new session's ownership entry (with the OpenAI door's state) is written before the client can lose it (resume.ts)
      const opened = async (admission: Admission) => {
        const doorStart = openai && newDoorStart(openai, admission, defaultTurnDetection, nowMs());
        return (await resumes.opened(admission, doorStart?.record), { admission, door: doorStart });
      };
      const admitted = resume ? resumes.admit(request, resume, door) : admit(admitDeps, request).then(opened);
      admitted.then(
        ({ admission, start, door: doorStart }: { admission: Admission; start?: SessionStart; door?: DoorStart }) => {
          if (aborted) return void resumes.abandoned(admission, start).catch(() => undefined);
          try {
            // one protocol, never the client's list: it may hold a credential entry
            res.upgrade<SocketData>({ admission, start, openai, doorStart }, key, protocolToAnswer(protocol), extensions, context);
          } catch (err) {
            // the socket went away between the check and the upgrade
            log.warn("upgrade could not complete", { error: (err as Error).message });
            void resumes.abandoned(admission, start).catch(() => undefined);
          }
        },
        (err) => {
          const e = toAppError(err);
          if (e.status >= 500 && e.kind === "internal") log.error("upgrade failed", { error: e.message });
          if (aborted) return;
          try {
            res.cork(() => writeRefusal(res, e.status >= 500 && e.kind === "internal" ? new AppError("internal", "internal_error", "internal error") : e));
          } catch {
            // aborted meanwhile
          }
        },
      );
    },
    open: (ws) => {
      sockets.add(ws);
      const data = ws.getUserData();
      try {
        openSocketSession(ws, data);
      } catch (err) {
        log.error("session open failed", { error: (err as Error).message });
        endQuietly(ws, closeFor("handler_failed"));
      }
    },
    message: (ws, message, isBinary) => {
      const { session, door } = ws.getUserData();
      if (!session) return;
      try {
        if (door) {
          if (isBinary) door.onBinary();
          else door.onText(message);
        } else if (isBinary) session.onAudio(message);
        else session.onText(message);
      } catch (err) {
        log.error("session error", { error: (err as Error).message });
        session.fail();
      }
    },
    close: (ws, code, message) => {
      sockets.delete(ws);
      const data = ws.getUserData();
      data.door?.closed();
      // held for a resume (lost without a close frame: a dropped network, a killed client), or taken over by one (resume.ts)
      if (data.session && !data.session.socketClosed(code, Buffer.from(message).toString("utf8"))) return;
      const { principal, sessionId } = data.admission;
      resumes.closed(sessionId);
      void leases.release(principal.keyId, sessionId).catch((err) => log.warn("lease release failed", { error: (err as Error).message }));
    },
  });
  app.ws<SocketData>(REALTIME_PATH, socketBehavior("native"));
  app.ws<SocketData>(OPENAI_REALTIME_PATH, socketBehavior("openai"));

  const onHandlerError = (err: unknown) => log.error("http handler failed", { error: (err as Error)?.message ?? String(err), stack: (err as Error)?.stack });
  app.any("/*", (res, req) => {
    // A throw out of a uWS handler ends the process: every path is guarded.
    try {
      const url = req.getUrl();
      if (url === REALTIME_PATH || url === OPENAI_REALTIME_PATH) return void writeRefusal(res, websocketRequired(url));
      if (handleDemoRoutes(res, req, { config, db: ctx.db, now })) return;
      if (!options.fetch) {
        res.writeStatus("404 Not Found").writeHeader("content-type", "application/json");
        return void res.end(JSON.stringify({ error: { message: `No route for ${req.getMethod().toUpperCase()} ${url}`, type: "invalid_request_error", code: "not_found" } }));
      }
      bridgeToFetch(options.fetch, res, req, onHandlerError);
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

  const host = options.host ?? config.http.host;
  const wantedPort = options.port ?? config.http.port;
  // uWS listens with SO_REUSEPORT unless told LIBUS_LISTEN_EXCLUSIVE_PORT: a second
  // instance on the port would start "fine" and the kernel would split connections
  // between the two. The native listen takes (host, port, options, cb); the package's
  // types only declare (port, options, cb).
  const listenWith = app.listen as unknown as (host: string, port: number, options: number, cb: (s: us_listen_socket | false) => void) => void;
  const listenOptions = config.http.reusePort ? LIBUS_LISTEN_DEFAULT : LIBUS_LISTEN_EXCLUSIVE_PORT;
  const listenOnce = async (): Promise<us_listen_socket | false> => {
    const socket = await new Promise<us_listen_socket | false>((resolve) => listenWith.call(app, host, wantedPort, listenOptions, resolve));
    if (socket) return socket;
    const code = await listenErrorCode(host, wantedPort);
    if (code && code !== "EADDRINUSE") throw new Error(`cannot listen on ${host}:${wantedPort}: ${code}`);
    return false;
  };
  const listenSocket = await bindWithin(listenOnce, {
    host,
    port: wantedPort,
    waitMs: config.shutdown.timeoutMs,
    logger: log,
  });
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
    if (upstream && nh.ok && headroom.shedNow(sessions.size, t)) newestOpen(sessions)?.shed();
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
