import { describe, expect, it } from "vitest";
import { AppError } from "../../shared/errors";
import { decideKey, evolveKey, initialKeyState, keyEventId } from "./decider";
import type { KeyCommand, KeyEvent } from "./events";

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
  it("records no use of a key never issued", () =>
    given().when({ type: "RecordKeyUse", data: { keyId: "key_1", now: "2026-01-03T00:00:00.000Z" } }).then([]));
  it("records use at most once a minute", () => {
    const usedAt = (at: string): KeyEvent => ({ type: "KeyUsed", data: { keyId: "key_1", usedAt: at } });
    const use = (at: string): KeyCommand => ({ type: "RecordKeyUse", data: { keyId: "key_1", now: at } });
    given(issued, usedAt("2026-01-01T00:05:00.000Z")).when(use("2026-01-01T00:05:59.999Z")).then([]);
    given(issued, usedAt("2026-01-01T00:05:59.999Z")).when(use("2026-01-01T00:06:00.000Z")).then([usedAt("2026-01-01T00:06:00.000Z")]);
    // a clock behind the last use in an earlier minute still records (lastUsedAt is the latest event's)
    given(issued, usedAt("2026-01-01T00:06:00.000Z")).when(use("2026-01-01T00:05:00.000Z")).then([usedAt("2026-01-01T00:05:00.000Z")]);
  });
});

describe("ApiKey event ids", () => {
  it("name the fact: one issue, one revocation, one use per key and minute", () => {
    expect(keyEventId(issued)).toBe("key_1:issued");
    expect(keyEventId(revoked)).toBe("key_1:revoked");
    const minute = Math.floor(Date.parse("2026-01-01T00:05:00.000Z") / 60_000);
    expect(keyEventId({ type: "KeyUsed", data: { keyId: "key_1", usedAt: "2026-01-01T00:05:00.000Z" } })).toBe(`key_1:used:${minute}`);
    expect(keyEventId({ type: "KeyUsed", data: { keyId: "key_1", usedAt: "2026-01-01T00:05:59.999Z" } })).toBe(`key_1:used:${minute}`);
    expect(keyEventId({ type: "KeyUsed", data: { keyId: "key_1", usedAt: "2026-01-01T00:06:00.000Z" } })).toBe(`key_1:used:${minute + 1}`);
  });
});

describe("ApiKey state", () => {
  const used = (at: string): KeyEvent => ({ type: "KeyUsed", data: { keyId: "key_1", usedAt: at } });
  const fold = (...events: KeyEvent[]) => events.reduce(evolveKey, initialKeyState);

  it("an active key remembers when it was last used; a revoked one keeps its revocation", () => {
    expect(fold(issued)).toEqual({ status: "active", keyId: "key_1", ownerId: "acme", expiresAt: null, lastUsedAt: null });
    expect(fold(issued, used("2026-01-01T10:00:00.000Z"), used("2026-01-01T11:00:00.000Z"))).toMatchObject({ status: "active", lastUsedAt: "2026-01-01T11:00:00.000Z" });
    const gone = fold(issued, revoked, used("2026-01-03T00:00:00.000Z"));
    expect(gone).toEqual({ status: "revoked", keyId: "key_1", ownerId: "acme", revokedAt: "2026-01-02T00:00:00.000Z" });
  });

  it("a revocation of a key already revoked, or never issued, changes nothing", () => {
    expect(fold(issued, revoked, { type: "KeyRevoked", data: { keyId: "key_1", revokedAt: "2026-02-01T00:00:00.000Z" } })).toMatchObject({ revokedAt: "2026-01-02T00:00:00.000Z" });
    expect(fold(revoked)).toEqual({ status: "none" });
    expect(fold(used("2026-01-01T10:00:00.000Z"))).toEqual({ status: "none" });
  });

  it("refusals name the key", () => {
    expect(() => decideKey(issue, fold(issued))).toThrow("key key_1 already exists");
    expect(() => decideKey(revoke, fold())).toThrow("no key with id key_1");
  });
});
