import { appendEvents, loadAggregate } from "../../shared/event-store";
import type { Logger } from "../../shared/logger";
import type { Nats } from "../../shared/nats";
import type { Principal } from "./auth";
import { decideKey, evolveKey, initialKeyState, keyEventId, useMinute, type KeyState } from "./decider";
import { keyEventEnvelope, type KeyCommand, type KeyEvent } from "./events";

type IssueKey = Extract<KeyCommand, { type: "IssueKey" }>["data"];
type KeyIssued = Extract<KeyEvent, { type: "KeyIssued" }>["data"];

/**
 * The only write path to the key stream (`key.evt.<keyId>`): every command is decided
 * by the key decider on the key's state and its events appended under `keyEventId`, so
 * a retry or a second gateway stores a fact once (within the stream's 2 min duplicate
 * window; beyond it the decider's state refuses the repeat).
 */
export interface KeyStore {
  /** A key's state folded from its stream, and the subject's last sequence (0: none). */
  load(keyId: string): Promise<{ state: KeyState; lastSeq: number }>;
  /** Issues a key under a new id (expects no event on its subject yet). */
  issue(data: IssueKey): Promise<{ issued: KeyIssued; lastSeq: number }>;
  /**
   * Revokes a key (`key_not_found` when it was never issued); revoking it again appends
   * nothing. Resolves the sequence the revocation is at or before.
   */
  revoke(keyId: string, now: Date): Promise<{ lastSeq: number }>;
  /**
   * Records that an authenticated key was used, for `lastUsedAt`, deciding on the state
   * authentication just read (no stream read per request). Fire-and-forget: a failure is
   * logged and never fails the request.
   */
  recordUse(principal: Principal, now: Date): void;
}

export function createKeyStore(deps: { nats: Nats; logger: Logger }): KeyStore {
  const { nats, logger } = deps;
  const { streams, subjects } = nats.topology;
  /** keyId → the minute this process last recorded: one append per key and minute per process. */
  const lastRecorded = new Map<string, number>();

  const append = (keyId: string, events: KeyEvent[], expected: number | "none" | "any") =>
    appendEvents<KeyEvent>(nats.js, keyEventEnvelope, subjects.keyEvent(keyId), events.map((e) => ({ ...e, msgId: keyEventId(e) })), { expected });

  const load = async (keyId: string) => {
    const { state, lastSeq } = await loadAggregate(nats.js, nats.jsm, streams.keys.name, keyEventEnvelope, subjects.keyEvent(keyId), initialKeyState, evolveKey);
    return { state, lastSeq };
  };

  return {
    load,
    async issue(data) {
      const events = decideKey({ type: "IssueKey", data }, initialKeyState);
      const { lastSeq } = await append(data.keyId, events, "none");
      const issued = events.find((e) => e.type === "KeyIssued");
      if (issued?.type !== "KeyIssued") throw new Error("IssueKey decided no KeyIssued");
      return { issued: issued.data, lastSeq };
    },
    async revoke(keyId, now) {
      const loaded = await load(keyId);
      const events = decideKey({ type: "RevokeKey", data: { keyId, now: now.toISOString() } }, loaded.state);
      if (!events.length) return { lastSeq: loaded.lastSeq };
      return { lastSeq: (await append(keyId, events, loaded.lastSeq)).lastSeq };
    },
    recordUse(principal, now) {
      const state: KeyState = {
        status: "active",
        keyId: principal.keyId,
        ownerId: principal.ownerId,
        expiresAt: principal.expiresAt?.toISOString() ?? null,
        lastUsedAt: principal.lastUsedAt?.toISOString() ?? null,
      };
      const events = decideKey({ type: "RecordKeyUse", data: { keyId: principal.keyId, now: now.toISOString() } }, state);
      if (!events.length) return;
      const minute = useMinute(now);
      if (lastRecorded.get(principal.keyId) === minute) return;
      lastRecorded.set(principal.keyId, minute);
      if (lastRecorded.size > 100_000) lastRecorded.clear();
      append(principal.keyId, events, "any").catch((err) => logger.warn("could not record key use", { keyId: principal.keyId, error: String(err) }));
    },
  };
}
