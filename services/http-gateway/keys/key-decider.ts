import type { KeyCommand, KeyEvent } from "../../../schemas/keys";
import { conflict, notFound } from "../../../shared/errors";

/**
 * The ApiKey aggregate: pure decide/evolve. Expiry is not an event: it is a time
 * check against `expiresAt` wherever the key is used.
 */
export type KeyState =
  | { status: "none" }
  | { status: "active"; keyId: string; ownerId: string; expiresAt: string | null; lastUsedAt: string | null }
  | { status: "revoked"; keyId: string; ownerId: string; revokedAt: string };

export const initialKeyState: KeyState = { status: "none" };

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
      return [{ type: "KeyUsed", data: { keyId: command.data.keyId, usedAt: command.data.now } }];
    default: {
      const never: never = command;
      return never;
    }
  }
}
