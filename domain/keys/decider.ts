import { conflict, notFound } from "../../shared/errors";
import type { KeyCommand, KeyEvent } from "./events";

/**
 * The ApiKey aggregate: pure decide/evolve. Expiry is not an event: it is a time
 * check against `expiresAt` wherever the key is used.
 */
export type KeyState =
  | { status: "none" }
  | { status: "active"; keyId: string; ownerId: string; expiresAt: string | null; lastUsedAt: string | null }
  | { status: "revoked"; keyId: string; ownerId: string; revokedAt: string };

export const initialKeyState: KeyState = { status: "none" };

/** `lastUsedAt` is kept to the minute: at most one KeyUsed per key per minute. */
const USE_RESOLUTION_MS = 60_000;

/** The minute (since the epoch) of an instant: the resolution of `lastUsedAt`. */
export function useMinute(at: string | Date): number {
  return Math.floor(new Date(at).getTime() / USE_RESOLUTION_MS);
}

/**
 * The event id (and JetStream msgID) of a key event: one per fact, so a retried
 * command, or several gateways recording the same minute's use, store it once.
 */
export function keyEventId(event: KeyEvent): string {
  switch (event.type) {
    case "KeyIssued":
      return `${event.data.keyId}:issued`;
    case "KeyRevoked":
      return `${event.data.keyId}:revoked`;
    case "KeyUsed":
      return `${event.data.keyId}:used:${useMinute(event.data.usedAt)}`;
    default: {
      const never: never = event;
      return never;
    }
  }
}

export function evolveKey(state: KeyState, event: KeyEvent): KeyState {
  switch (event.type) {
    case "KeyIssued":
      return { status: "active", keyId: event.data.keyId, ownerId: event.data.ownerId, expiresAt: event.data.expiresAt, lastUsedAt: null };
    case "KeyRevoked":
      return state.status === "active"
        ? { status: "revoked", keyId: state.keyId, ownerId: state.ownerId, revokedAt: event.data.revokedAt }
        : state;
    case "KeyUsed":
      return state.status === "active" ? { ...state, lastUsedAt: event.data.usedAt } : state;
    default: {
      const never: never = event;
      return never;
    }
  }
}

export function decideKey(command: KeyCommand, state: KeyState): KeyEvent[] {
  switch (command.type) {
    case "IssueKey": {
      if (state.status !== "none") throw conflict("key_exists", `key ${command.data.keyId} already exists`);
      const { now, ...rest } = command.data;
      return [{ type: "KeyIssued", data: { ...rest, issuedAt: now } }];
    }
    case "RevokeKey":
      if (state.status === "none") throw notFound("key_not_found", `no key with id ${command.data.keyId}`);
      if (state.status === "revoked") return [];
      return [{ type: "KeyRevoked", data: { keyId: command.data.keyId, revokedAt: command.data.now } }];
    case "RecordKeyUse":
      if (state.status !== "active") return [];
      if (state.lastUsedAt !== null && useMinute(state.lastUsedAt) === useMinute(command.data.now)) return [];
      return [{ type: "KeyUsed", data: { keyId: command.data.keyId, usedAt: command.data.now } }];
    default: {
      const never: never = command;
      return never;
    }
  }
}
