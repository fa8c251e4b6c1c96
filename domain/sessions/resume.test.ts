import { describe, expect, it } from "vitest";
import {
  decideResume,
  DEFAULT_RESUME_GRACE_SECONDS,
  issueResumeCredential,
  MAX_RESUME_GRACE_SECONDS,
  readResumeCredential,
  replayPosition,
  replayPositions,
  RESUME_CREDENTIAL_PREFIX,
  resumeGraceMs,
  type SessionOwnership,
} from "./resume";
import { issueSessionToken } from "../keys/auth";

const secret = "s".repeat(32);
const now = Date.parse("2026-01-01T00:00:00Z");
const session = { sessionId: "sess_0123456789abcdef01234567", keyId: "key_a", ownerId: "tenant-a", gen: 2 };
const entry = (over: Partial<SessionOwnership> = {}): SessionOwnership => ({
  gen: 2,
  keyId: "key_a",
  ownerId: "tenant-a",
  gateway: null,
  heldBy: "gw_1",
  heldUntil: now + 30_000,
  graceMs: 30_000,
  at: now,
  ...over,
});
const caller = { keyId: "key_a", ownerId: "tenant-a" };
const ctx = { now, gateway: "gw_2", gatewayGone: false, revoked: () => false };
const codeOf = (f: () => unknown) => {
  try {
    f();
  } catch (err) {
    return (err as { code: string; status: number }).code + ":" + (err as { status: number }).status;
  }
  return "none";
};

describe("resume credential", () => {
  it("round-trips its claims and is refused when forged, tampered with, of another kind, or expired", () => {
    const credential = issueResumeCredential(secret, session, 60_000, now);
    expect(credential.startsWith(RESUME_CREDENTIAL_PREFIX)).toBe(true);
    expect(readResumeCredential(secret, credential, now)).toMatchObject({ typ: "resume", sid: session.sessionId, kid: "key_a", own: "tenant-a", gen: 2 });
    expect(codeOf(() => readResumeCredential("other-secret-value-of-32-chars!!", credential, now))).toBe("invalid_resume_credential:401");
    expect(codeOf(() => readResumeCredential(secret, credential.slice(0, -2), now))).toBe("invalid_resume_credential:401");
    // an rt_ token relabelled: signed by the same secret, but not a resume's claims
    const rt = issueSessionToken(secret, { keyId: "key_a", ownerId: "tenant-a" } as never, new Date(now)).token;
    expect(codeOf(() => readResumeCredential(secret, `rs_${rt.slice(3)}`, now))).toBe("invalid_resume_credential:401");
    expect(codeOf(() => readResumeCredential(secret, credential, now + 61_000))).toBe("resume_expired:410");
  });

  it("grace: the plan's, else 30 s, bounded to 1..120 s", () => {
    expect(resumeGraceMs(undefined)).toBe(DEFAULT_RESUME_GRACE_SECONDS * 1000);
    expect(resumeGraceMs(5)).toBe(5000);
    expect(resumeGraceMs(10_000)).toBe(MAX_RESUME_GRACE_SECONDS * 1000);
  });

  it("replay position: none or evt_0 is the start; a gateway's own event id stands for the stored event before it", () => {
    expect(replayPosition(null)).toEqual({ kind: "start" });
    expect(replayPosition("evt_0.3")).toEqual({ kind: "start" });
    expect(replayPosition("evt_abc123.2")).toEqual({ kind: "after", eventId: "evt_abc123" });
    expect(replayPosition("evt_abc123")).toEqual({ kind: "after", eventId: "evt_abc123" });
    expect(codeOf(() => replayPosition("evt_0f3a-uuid"))).toBe("resume_event_unknown:400");
  });

  it("replay positions: one for a one-lane session; one per channel, comma-separated, for a multichannel one (the credential's ch)", () => {
    expect(replayPositions("evt_abc123.2", undefined)).toEqual([{ kind: "after", eventId: "evt_abc123" }]);
    // a comma is not part of a one-lane session's id
    expect(codeOf(() => replayPositions("evt_abc,evt_def", undefined))).toBe("resume_event_unknown:400");
    expect(replayPositions(null, 2)).toEqual([{ kind: "start" }, { kind: "start" }]);
    expect(replayPositions("evt_abc.1,evt_def", 2)).toEqual([
      { kind: "after", eventId: "evt_abc" },
      { kind: "after", eventId: "evt_def" },
    ]);
    // a channel that had no event yet: evt_0 or empty
    expect(replayPositions("evt_0,evt_def", 2)).toEqual([{ kind: "start" }, { kind: "after", eventId: "evt_def" }]);
    expect(replayPositions(",evt_def", 2)).toEqual([{ kind: "start" }, { kind: "after", eventId: "evt_def" }]);
    expect(replayPositions("evt_abc", 1)).toEqual([{ kind: "after", eventId: "evt_abc" }]);
    // another count of ids, or garbage in one of them
    expect(codeOf(() => replayPositions("evt_abc", 2))).toBe("resume_event_unknown:400");
    expect(codeOf(() => replayPositions("evt_abc,evt_def,evt_012", 2))).toBe("resume_event_unknown:400");
    expect(codeOf(() => replayPositions("evt_abc,not-an-id", 2))).toBe("resume_event_unknown:400");
  });

  it("a multichannel session's credential carries its channel count; a one-lane session's none", () => {
    expect(readResumeCredential(secret, issueResumeCredential(secret, { ...session, multichannelChannels: 2 }, 60_000, now), now).ch).toBe(2);
    expect(readResumeCredential(secret, issueResumeCredential(secret, session, 60_000, now), now).ch).toBeUndefined();
  });
});

describe("decideResume", () => {
  const claims = { typ: "resume" as const, sid: session.sessionId, kid: "key_a", own: "tenant-a", gen: 2, exp: now / 1000 + 60 };

  it("takes a held session at the next generation", () => {
    const v = decideResume(claims, caller, entry(), ctx);
    expect(v).toEqual({ kind: "take", next: { ...entry(), gen: 3, gateway: "gw_2", heldBy: null, heldUntil: null, at: now } });
  });

  it("refuses another owner, an unknown or expired session, and a spent credential", () => {
    const refusal = (v: ReturnType<typeof decideResume>) => (v.kind === "refuse" ? `${v.error.code}:${v.error.status}` : v.kind);
    expect(refusal(decideResume(claims, { keyId: "key_b", ownerId: "tenant-b" }, entry(), ctx))).toBe("resume_forbidden:403");
    expect(refusal(decideResume(claims, caller, undefined, ctx))).toBe("resume_expired:410");
    expect(refusal(decideResume(claims, caller, entry({ heldUntil: now }), ctx))).toBe("resume_expired:410");
    expect(refusal(decideResume(claims, caller, entry({ gen: 3 }), ctx))).toBe("session_resumed_elsewhere:409");
  });

  it("refuses any key, of the same owner too, once the key the session was opened with is revoked", () => {
    const refusal = (v: ReturnType<typeof decideResume>) => (v.kind === "refuse" ? `${v.error.code}:${v.error.status}` : v.kind);
    const revokedA = { ...ctx, revoked: (keyId: string) => keyId === "key_a" };
    expect(refusal(decideResume(claims, { keyId: "key_c", ownerId: "tenant-a" }, entry(), revokedA))).toBe("resume_forbidden:403");
    expect(refusal(decideResume({ ...claims, kid: "key_c" }, { keyId: "key_c", ownerId: "tenant-a" }, entry({ keyId: "key_a" }), revokedA))).toBe("resume_forbidden:403");
    expect(decideResume(claims, { keyId: "key_c", ownerId: "tenant-a" }, entry(), ctx).kind).toBe("take");
  });

  it("asks a gateway still driving the session to let go; takes it once that one is gone", () => {
    expect(decideResume(claims, caller, entry({ gateway: "gw_1", heldUntil: null }), ctx)).toEqual({ kind: "ask_gateway", gateway: "gw_1" });
    expect(decideResume(claims, caller, entry({ gateway: "gw_1", heldUntil: null }), { ...ctx, gatewayGone: true }).kind).toBe("take");
  });
});
