import type { KV } from "@nats-io/kv";
import { audioControl, vadSessionKey } from "../../schemas/realtime-internal";
import { safeJson } from "../../shared/json";
import type { Nats } from "../../shared/nats";
import { stableEventId } from "./session-feed";
import { readSessionRecords } from "./session-records";

/** What a resume reads besides the ownership entry (resume.ts): the upgrade's query, the session's stored events, its VAD settings; and the gateways' requests to each other. */

export interface ResumeRequest {
  credential: string;
  lastEventId: string | null;
}

/** The resume parameters of an upgrade's query, or null for a new session. */
export function resumeRequestOf(query: string): ResumeRequest | null {
  const params = new URLSearchParams(query);
  const credential = params.get("resume");
  if (credential === null || credential === "") return null;
  return { credential, lastEventId: params.get("last_event_id") };
}

/** Whether the session's stored events include the one with this stable id. */
export async function holdsEvent(nats: Nats, sessionId: string, eventId: string): Promise<boolean> {
  return readSessionRecords(nats, sessionId, (r) => r.type === "rt.server_event" && stableEventId(r.metadata.eventId) === eventId, { waitMs: 0 });
}

/** The session's transcription settings as the VAD keeps them (services/vad/session-state.ts), if any. */
export async function readVadSettings(kv: KV, sessionId: string): Promise<{ language: string | null; prompt: string | null; keyterms?: string[] } | null> {
  const e = await kv.get(vadSessionKey(sessionId)).catch(() => null);
  if (!e || e.operation !== "PUT") return null;
  const parsed = audioControl.safeParse(safeJson(e.string()));
  return parsed.success && parsed.data.kind === "start" ? { language: parsed.data.language, prompt: parsed.data.prompt, ...(parsed.data.keyterms ? { keyterms: parsed.data.keyterms } : {}) } : null;
}

/** The `session_id` of a request between gateways; "" for anything else (garbage is answered "not here", never a throw in a callback). */
export function sessionIdIn(text: string): string {
  const body = safeJson(text) as { session_id?: unknown } | undefined;
  return typeof body?.session_id === "string" ? body.session_id : "";
}
