import uWS, { type WebSocket } from "@trufflesuite/uws-js-unofficial";
import type { TurnDetection } from "../../schemas/realtime";
import { closeFor } from "../../domain/sessions/close-rules";
import { protocolToAnswer } from "../../domain/keys/upgrade-credentials";
import { OPENAI_MAX_TEXT_FRAME_BYTES, type DoorRecord } from "../../schemas/openai-realtime";
import { clientAddress } from "../../shared/auth-throttle";
import { AppError, toAppError } from "../../shared/errors";
import type { Logger } from "../../shared/logger";
import { admit, type Admission, type AdmitDeps } from "./admit";
import { createOpenAiDoor, doorAdmission, newDoorStart, readOpenAiUpgrade, type DoorStart, type OpenAiDoor, type OpenAiUpgrade } from "./openai-door";
import type { Resumes } from "./resume";
import { resumeRequestOf } from "./resume-reads";
import { openSession, type Session, type SessionDeps } from "./session";
import type { SessionSocket, SessionStart } from "./session-io";
import { writeRefusal } from "./upgrade-refusal";

/**
 * The gateway's WebSocket side (gateway.ts): the upgrade (a new session admitted, or a
 * resume taken: resume.ts), the open (the session, behind the OpenAI door on
 * `/v1/realtime`: openai-door.ts), each frame to the session, and the socket's close
 * (the session held for a resume or ended, as its decider says: domain/sessions/connection.ts).
 */
export interface SocketData {
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

export interface SocketContext {
  rt: AdmitDeps["config"]["realtime"];
  admitDeps: AdmitDeps;
  resumes: Resumes;
  log: Logger;
  defaultTurnDetection: TurnDetection;
  nowMs(): number;
  /** The open sockets (the gateway's stop ends them). */
  sockets: Set<WebSocket<SocketData>>;
  /** What every session gets of the gateway, but its hold (resume.ts). */
  sessionDeps: Omit<SessionDeps, "onLost">;
  /** A session was opened on a socket. */
  opened(session: Session): void;
}

const MAX_WIRE_FRAME_BYTES = 16 * 1024 * 1024;

/** Closes a socket that may already be closed (uWS throws on a closed one). */
export function endQuietly(ws: WebSocket<SocketData>, { code, reason }: { code: number; reason: string }): void {
  try {
    ws.end(code, reason);
  } catch {
    // already closed
  }
}

export function socketBehavior(door: Door, c: SocketContext): uWS.WebSocketBehavior<SocketData> {
  const { rt, resumes, log } = c;
  return {
    // uWS drops a frame over maxPayloadLength with a bare TCP close (1006 at the client):
    // accept up to 16 MiB and close 1009 frame_too_large ourselves above config (1 MiB;
    // the OpenAI door: its text frames up to OPENAI_MAX_TEXT_FRAME_BYTES, base64 audio).
    // uWS buffers a frame until it is whole, so this bounds memory per socket too.
    maxPayloadLength: door === "openai" ? OPENAI_MAX_TEXT_FRAME_BYTES + 1024 * 1024 : Math.max(MAX_WIRE_FRAME_BYTES, rt.maxFrameBytes + 1024),
    maxBackpressure: rt.maxClientBufferBytes + 1024 * 1024,
    idleTimeout: 120,
    sendPingsAutomatically: true,
    compression: uWS.DISABLED,
    upgrade: (res, req, context) => upgrade(door, c, res, req, context),
    open: (ws) => {
      c.sockets.add(ws);
      try {
        openSocketSession(ws, ws.getUserData(), c);
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
        try {
          session.fail();
        } catch {
          endQuietly(ws, closeFor("handler_failed"));
        }
      }
    },
    close: (ws, code, message) => {
      c.sockets.delete(ws);
      const data = ws.getUserData();
      data.door?.closed();
      // held for a resume (lost without a close frame: a dropped network, a killed client), or taken over by one (resume.ts)
      if (data.session && !data.session.socketClosed(code, Buffer.from(message).toString("utf8"))) return;
      const { principal, sessionId } = data.admission;
      resumes.closed(sessionId);
      void c.admitDeps.leases.release(principal.keyId, sessionId).catch((err) => log.warn("lease release failed", { error: (err as Error).message }));
    },
  };
}

/** An upgrade: admitted as a new session (its ownership entry written first) or taken as a resume, then upgraded; or refused with an HTTP error. */
function upgrade(door: Door, c: SocketContext, res: uWS.HttpResponse, req: uWS.HttpRequest, context: uWS.us_socket_context_t) {
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
  const source = clientAddress(Buffer.from(res.getRemoteAddressAsText()).toString(), req.getHeader("x-forwarded-for"), c.admitDeps.config.auth.trustedProxyHops);
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
    const doorStart = openai && newDoorStart(openai, admission, c.defaultTurnDetection, c.nowMs());
    try {
      await c.resumes.opened(admission, doorStart?.record);
    } catch (err) {
      c.admitDeps.headroom.settled();
      throw err;
    }
    return { admission, door: doorStart };
  };
  const admitted = resume ? c.resumes.admit(request, resume, door) : admit(c.admitDeps, request).then(opened);
  admitted.then(
    ({ admission, start, door: doorStart }: { admission: Admission; start?: SessionStart; door?: DoorStart }) => {
      // a new session counts as in flight for admission until it is open (or never will be)
      const settled = () => resume || c.admitDeps.headroom.settled();
      if (aborted) {
        settled();
        return void c.resumes.abandoned(admission, start).catch(() => undefined);
      }
      try {
        // one protocol, never the client's list: it may hold a credential entry
        res.upgrade<SocketData>({ admission, start, openai, doorStart }, key, protocolToAnswer(protocol), extensions, context);
        settled();
      } catch (err) {
        settled();
        // the socket went away between the check and the upgrade
        c.log.warn("upgrade could not complete", { error: (err as Error).message });
        void c.resumes.abandoned(admission, start).catch(() => undefined);
      }
    },
    (err) => {
      const e = toAppError(err);
      if (e.status >= 500 && e.kind === "internal") c.log.error("upgrade failed", { error: e.message });
      if (aborted) return;
      try {
        res.cork(() => writeRefusal(res, e.status >= 500 && e.kind === "internal" ? new AppError("internal", "internal_error", "internal error") : e));
      } catch {
        // aborted meanwhile
      }
    },
  );
}

/** The session of a socket just opened (through the OpenAI door on its path); a key revoked meanwhile closes it at once. */
function openSocketSession(ws: WebSocket<SocketData>, data: SocketData, c: SocketContext) {
  const { rt, resumes, log, defaultTurnDetection } = c;
  const raw = { send: (text: string) => ws.send(text, false), bufferedAmount: () => ws.getBufferedAmount(), end: (code: number, reason: string) => ws.end(code, reason) };
  let socket: SessionSocket = { ...raw, send: (event) => raw.send(JSON.stringify(event)) };
  let admission = data.admission;
  if (data.openai) {
    // the OpenAI door: its events in, OpenAI's out, over the same session (openai-door.ts)
    const { openai, doorStart } = data;
    const start = doorStart ?? newDoorStart(openai, admission, defaultTurnDetection, c.nowMs());
    const persist = (record: DoorRecord) => resumes.doorChanged(admission.sessionId, record);
    data.door = createOpenAiDoor(raw, admission, { upgrade: openai, vad: defaultTurnDetection, maxFrameBytes: rt.maxFrameBytes, preset: admission.presetSession, start, persist });
    const refused = data.door.refusal();
    if (refused) return endQuietly(ws, refused);
    socket = data.door.sessionSocket;
    admission = doorAdmission(admission);
  }
  const onLost = (s: Session, code: number) => void resumes.hold(s, code).catch((err) => log.warn("holding a session failed", { error: (err as Error).message }));
  const session = openSession(admission, socket, { ...c.sessionDeps, onLost }, data.start ?? { kind: "new", offer: resumes.offerFor(admission) });
  data.session = session;
  c.opened(session);
  data.door?.attach(session);
  // revoked between its admission and now: the feed's close already passed it by
  if (c.admitDeps.keyCache.isRevoked(session.keyId)) setImmediate(() => session.revoke());
}
