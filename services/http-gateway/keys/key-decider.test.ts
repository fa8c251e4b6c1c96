import { describe, expect, it } from "vitest";
import type { KeyCommand, KeyEvent } from "../../../schemas/keys";
import { AppError } from "../../../shared/errors";
import { decideKey, evolveKey, initialKeyState } from "./key-decider";

const given = (...events: KeyEvent[]) => ({
  when: (command: KeyCommand) => {
    const state = events.reduce(evolveKey, initialKeyState);
    const run = () => decideKey(command, state);
    return {
      then: (expected: KeyEvent[]) => expect(run()).toEqual(expected),
      thenThrows: (code: string) => {
        try {
          run();
        } catch (err) {
          expect(err).toBeInstanceOf(AppError);
          expect((err as AppError).code).toBe(code);
          return;
        }
        throw new Error(`expected ${code}`);
      },
    };
  },
});

const hash = "a".repeat(64);
const issued: KeyEvent = {
  type: "KeyIssued",
  data: { keyId: "key_1", ownerId: "acme", keyHash: hash, keyPrefix: "sk-abcdefgh", lastFour: "wxyz", plan: "free", label: null, expiresAt: null, issuedAt: "2026-01-01T00:00:00.000Z" },
};
const issue: KeyCommand = {
  type: "IssueKey",
  data: { keyId: "key_1", ownerId: "acme", keyHash: hash, keyPrefix: "sk-abcdefgh", lastFour: "wxyz", plan: "free", label: null, expiresAt: null, now: "2026-01-01T00:00:00.000Z" },
};
const revoke: KeyCommand = { type: "RevokeKey", data: { keyId: "key_1", now: "2026-01-02T00:00:00.000Z" } };
const revoked: KeyEvent = { type: "KeyRevoked", data: { keyId: "key_1", revokedAt: "2026-01-02T00:00:00.000Z" } };

describe("ApiKey decider", () => {
  it("issues a new key", () => given().when(issue).then([issued]));
  it("refuses to issue the same key id twice", () => given(issued).when(issue).thenThrows("key_exists"));
  it("revokes an active key", () => given(issued).when(revoke).then([revoked]));
  it("revoking twice records nothing more", () => given(issued, revoked).when(revoke).then([]));
  it("revoking an unknown key is key_not_found", () => given().when(revoke).thenThrows("key_not_found"));
  it("records use of an active key", () =>
    given(issued)
      .when({ type: "RecordKeyUse", data: { keyId: "key_1", now: "2026-01-01T00:05:00.000Z" } })
      .then([{ type: "KeyUsed", data: { keyId: "key_1", usedAt: "2026-01-01T00:05:00.000Z" } }]));
  it("records no use of a revoked key", () =>
    given(issued, revoked).when({ type: "RecordKeyUse", data: { keyId: "key_1", now: "2026-01-03T00:00:00.000Z" } }).then([]));
});
