import { describe, expect, it } from "vitest";
import { CLOSE, type CloseReason } from "../../schemas/realtime";
import type { SessionLimits } from "./close-rules";
import { OUTCOME_GRACE_MS } from "./close-rules";
import {
  closeReasonOf,
  decideConnection,
  GRACEFUL_CLOSE_WAIT_MS,
  initialConnection,
  isConnected,
  isDetached,
  isResumable,
  type ConnectionEffect,
  type ConnectionInput,
  type ConnectionState,
} from "./connection";
import { decideResume, issueResumeCredential, readResumeCredential, replayPositions, restoredDoor, type SessionOwnership } from "./resume";

const T0 = 1_800_000_000_000;
const limits: SessionLimits = {
  maxFrameBytes: 1024 * 1024,
  maxAudioSecondsPerSession: 3600,
  maxSessionSeconds: 7200,
  idleTimeoutSeconds: 30,
  maxClientBufferBytes: 4 * 1024 * 1024,
  backpressureGraceMs: 2000,
};

type Start = Parameters<typeof initialConnection>[0];

/** given(start, inputs…).when(input).then(effects, and optionally the phase it leaves). */
function given(start: Start = { kind: "new", resumable: true }, ...inputs: ConnectionInput[]) {
  let state: ConnectionState = initialConnection(start, T0);
  for (const input of inputs) state = decideConnection(input, state, limits).state;
  return {
    state,
    when(input: ConnectionInput) {
      const d = decideConnection(input, state, limits);
      return {
        d,
        then(effects: ConnectionEffect[], phase?: ConnectionState["phase"]["status"]) {
          expect(d.effects).toEqual(effects);
          if (phase) expect(d.state.phase.status).toBe(phase);
          return d.state;
        },
      };
    },
  };
}

const live: Start = { kind: "new", resumable: true };
const notOffered: Start = { kind: "new", resumable: false };
const resumed: Start = { kind: "resume" };
const closes = (reason: CloseReason): ConnectionEffect[] => [{ kind: "close", reason }];
const frame = (bytes: number, over: Partial<Extract<ConnectionInput, { kind: "frame" }>> = {}): ConnectionInput => ({ kind: "frame", binary: true, bytes, bytesPerFrame: 2, now: T0 + 1000, ...over });
const counted = (audioMs: number, over: { allowanceMs?: number; budgetExhausted?: boolean } = {}): ConnectionInput => ({ kind: "audio_counted", audioMs, allowanceMs: 10_000, budgetExhausted: false, ...over });
const swept = (now: number, over: Partial<Extract<ConnectionInput, { kind: "swept" }>> = {}): ConnectionInput => ({
  kind: "swept",
  now,
  upstreamAvailable: true,
  bufferedBytes: 0,
  overloadedMs: 0,
  natsHealthy: true,
  ...over,
});
/** A sweep that closes nothing: the audio flushed, usage recorded. */
const keepsOn = (now: number): ConnectionEffect[] => [{ kind: "flush_audio" }, { kind: "tick_usage", now }];
const closeRequested: ConnectionInput = { kind: "close_requested", now: T0 + 5000 };
const forwarded = (vadFlushed: boolean, pendingItems: number): ConnectionInput => ({ kind: "event_forwarded", vadFlushed, pendingItems });

describe("opening", () => {
  it("a new session is live at once; with no audio left in the key's window it closes 1008 audio_quota_exhausted", () => {
    given(live).when({ kind: "opened", remainingAudioSeconds: 10 }).then([{ kind: "top_up" }], "live");
    given(live).when({ kind: "opened", remainingAudioSeconds: 0 }).then(closes(CLOSE.audioQuotaExhausted), "closing");
  });

  it("a resumed connection refuses audio until the VAD answers (resume_in_progress), then takes it", () => {
    given(resumed).when(frame(640)).then([{ kind: "refuse_frame", code: "resume_in_progress" }], "opening");
    given(resumed, { kind: "resumed", offered: true }).when(frame(640)).then([{ kind: "take_audio" }], "live");
  });

  it("a resume the VAD never answers closes 1013 upstream_unavailable", () => {
    given(resumed).when({ kind: "resume_failed" }).then(closes(CLOSE.upstreamUnavailable), "closing");
  });

  it("session.resumed without a new credential leaves a connection that is not resumable", () => {
    expect(isResumable(given(resumed).state.phase)).toBe(true);
    expect(isResumable(given(resumed, { kind: "resumed", offered: false }).state.phase)).toBe(false);
    expect(isResumable(given(resumed, { kind: "resumed", offered: true }).state.phase)).toBe(true);
  });
});

describe("frames", () => {
  it("a frame over RT_MAX_FRAME_BYTES closes 1009 frame_too_large, text or binary; so does the OpenAI door's oversize text frame", () => {
    given().when(frame(limits.maxFrameBytes)).then([{ kind: "take_audio" }]);
    given().when(frame(limits.maxFrameBytes + 2)).then(closes(CLOSE.frameTooLarge), "closing");
    given().when(frame(limits.maxFrameBytes + 1, { binary: false })).then(closes(CLOSE.frameTooLarge), "closing");
    given().when({ kind: "door_frame_too_large" }).then(closes(CLOSE.frameTooLarge), "closing");
  });

  it("a binary frame cut inside a sample is refused and dropped; an empty one is nothing; a text frame is read", () => {
    given().when(frame(3)).then([{ kind: "refuse_frame", code: "invalid_audio_frame" }], "live");
    given().when(frame(6, { bytesPerFrame: 4 })).then([{ kind: "refuse_frame", code: "invalid_audio_frame" }]);
    given().when(frame(0)).then([]);
    given().when(frame(3, { binary: false })).then([{ kind: "read_text" }]);
  });

  it("a taken frame moves the idle timer; an empty one does not", () => {
    expect(given(live, frame(640, { now: T0 + 7000 })).state.lastAudioAt).toBe(T0 + 7000);
    expect(given(live, frame(0, { now: T0 + 7000 })).state.lastAudioAt).toBe(T0);
  });

  it("after the server's close, frames and messages are ignored", () => {
    const closing: ConnectionInput = { kind: "stop", cause: "key_revoked" };
    given(live, closing).when(frame(640)).then([]);
    given(live, closing).when({ kind: "message" }).then([]);
    given(live).when({ kind: "message" }).then([{ kind: "apply_message" }]);
  });
});

describe("audio limits, the key's budget, the publisher", () => {
  it("audio counted: topped up and published; past max_audio_seconds_per_session 1008 session_audio_limit", () => {
    given().when(counted(3_600_000, { allowanceMs: 4_000_000 })).then([{ kind: "top_up" }, { kind: "publish_audio" }]);
    given().when(counted(3_600_001, { allowanceMs: 4_000_000 })).then(closes(CLOSE.sessionAudioLimit), "closing");
  });

  it("a used-up budget closes 1008 audio_quota_exhausted once the audio passes the grant, counted or settled", () => {
    given().when(counted(10_001, { budgetExhausted: true })).then(closes(CLOSE.audioQuotaExhausted));
    given().when({ kind: "budget_settled", audioMs: 10_001, allowanceMs: 10_000, budgetExhausted: true }).then(closes(CLOSE.audioQuotaExhausted));
    given().when({ kind: "budget_settled", audioMs: 9_000, allowanceMs: 10_000, budgetExhausted: false }).then([{ kind: "top_up" }]);
  });

  it("a publish refused by the stream closes 1011 client_error while NATS is up; any other failure 1013 upstream_unavailable", () => {
    given().when({ kind: "publish_failed", refused: true, natsHealthy: true }).then(closes(CLOSE.clientError));
    given().when({ kind: "publish_failed", refused: true, natsHealthy: false }).then(closes(CLOSE.upstreamUnavailable));
    given().when({ kind: "publish_failed", refused: false, natsHealthy: true }).then(closes(CLOSE.upstreamUnavailable));
  });

  it("acks piling up past the grace close 1013 upstream_unavailable only while NATS is down", () => {
    given().when({ kind: "audio_published", overloadedMs: 2001, natsHealthy: false }).then(closes(CLOSE.upstreamUnavailable));
    given().when({ kind: "audio_published", overloadedMs: 2001, natsHealthy: true }).then([]);
    given().when({ kind: "audio_published", overloadedMs: 2000, natsHealthy: false }).then([]);
  });

  it("a client not reading closes 1013 client_backpressure: a dropped send, or more unsent than RT_MAX_CLIENT_BUFFER_BYTES", () => {
    given().when({ kind: "event_sent", result: 2, bufferedBytes: 0 }).then(closes(CLOSE.clientBackpressure));
    given().when({ kind: "event_sent", result: 0, bufferedBytes: limits.maxClientBufferBytes + 1 }).then(closes(CLOSE.clientBackpressure));
    given().when({ kind: "event_sent", result: 0, bufferedBytes: limits.maxClientBufferBytes }).then([]);
  });
});

describe("the sweep", () => {
  it("flushes the audio and records usage while nothing closes", () => {
    given().when(swept(T0 + 1000)).then(keepsOn(T0 + 1000), "live");
  });

  it("no audio for idle_timeout_seconds closes 4408 idle_timeout; audio moves the timer", () => {
    given().when(swept(T0 + 30_000)).then(keepsOn(T0 + 30_000));
    given().when(swept(T0 + 30_001)).then(closes(CLOSE.idleTimeout), "closing");
    given(live, frame(640, { now: T0 + 20_000 })).when(swept(T0 + 40_000)).then(keepsOn(T0 + 40_000));
  });

  it("open past max_session_seconds closes 1008 session_duration_limit", () => {
    given(live, frame(640, { now: T0 + 7_190_000 })).when(swept(T0 + 7_200_001)).then(closes(CLOSE.sessionDurationLimit));
  });

  it("more unsent than RT_MAX_CLIENT_BUFFER_BYTES closes 1013 client_backpressure", () => {
    given().when(swept(T0 + 1000, { bufferedBytes: limits.maxClientBufferBytes + 1 })).then(closes(CLOSE.clientBackpressure));
  });

  it("an unavailable upstream closes 1013 upstream_unavailable, after the outcomes owed (at most OUTCOME_GRACE_MS)", () => {
    given().when(swept(T0 + 1000, { upstreamAvailable: false })).then(closes(CLOSE.upstreamUnavailable));
    const owing = given(live, forwarded(false, 1), swept(T0 + 1000, { upstreamAvailable: false }));
    expect(owing.state.upstreamLostAt).toBe(T0 + 1000);
    owing.when(swept(T0 + 1000 + OUTCOME_GRACE_MS - 1, { upstreamAvailable: false })).then(keepsOn(T0 + 1000 + OUTCOME_GRACE_MS - 1), "live");
    owing.when(swept(T0 + 1000 + OUTCOME_GRACE_MS, { upstreamAvailable: false })).then(closes(CLOSE.upstreamUnavailable));
    // back: the clock of the loss starts again
    expect(given(live, forwarded(false, 1), swept(T0 + 1000, { upstreamAvailable: false }), swept(T0 + 1250)).state.upstreamLostAt).toBeNull();
  });
});

describe("server closes", () => {
  it("the key revoked: 1008 key_revoked; the newest session shed: 1013 upstream_backpressure; a handler threw: 1011 client_error", () => {
    given().when({ kind: "stop", cause: "key_revoked" }).then(closes(CLOSE.keyRevoked), "closing");
    given().when({ kind: "stop", cause: "load_shed" }).then(closes(CLOSE.upstreamBackpressure), "closing");
    given().when({ kind: "stop", cause: "handler_failed" }).then(closes(CLOSE.clientError), "closing");
  });

  it("only the first close counts", () => {
    given(live, { kind: "stop", cause: "key_revoked" }).when({ kind: "stop", cause: "load_shed" }).then([], "closing");
    given(live, { kind: "stop", cause: "key_revoked" }).when(swept(T0 + 60_000)).then([]);
    expect(closeReasonOf(given(live, { kind: "stop", cause: "key_revoked" }).state.phase)).toEqual(CLOSE.keyRevoked);
  });
});

describe("graceful close (session.close)", () => {
  it("asks the VAD to flush and sends the audio; audio after it is counted, not published", () => {
    given().when(closeRequested).then([{ kind: "end_vad", flush: true }, { kind: "flush_audio" }], "draining");
    given(live, closeRequested).when(counted(1000)).then([{ kind: "top_up" }]);
    expect(isResumable(given(live, closeRequested).state.phase)).toBe(false);
  });

  it("closes 1000 once the VAD has flushed and every committed item has its result", () => {
    given(live, closeRequested).when(forwarded(true, 1)).then([], "draining");
    given(live, closeRequested).when(forwarded(false, 0)).then([], "draining");
    given(live, closeRequested).when(forwarded(true, 0)).then(closes(CLOSE.normal), "closing");
    // without session.close, a flush is no reason to close
    given(live).when(forwarded(true, 0)).then([], "live");
  });

  it("closes 1000 when the wait runs out, and only the deadline counts while it waits", () => {
    const deadline = T0 + 5000 + GRACEFUL_CLOSE_WAIT_MS;
    given(live, closeRequested).when(swept(deadline - 1, { upstreamAvailable: false })).then([]);
    given(live, closeRequested).when(swept(deadline)).then(closes(CLOSE.normal));
  });

  it("the VAD is told the session ended when the socket goes, unless a drain cut short by another close told it already", () => {
    const gone: ConnectionInput = { kind: "socket_closed", code: 1000, reason: "" };
    given(live, closeRequested, forwarded(true, 0)).when(gone).then([{ kind: "end_vad", flush: false }, { kind: "release", code: 1000, reason: "", ended: true }], "closed");
    given(live, closeRequested, { kind: "stop", cause: "key_revoked" }).when({ ...gone, code: 1008 }).then([{ kind: "release", code: 1008, reason: "", ended: true }]);
    given(live, closeRequested).when(gone).then([{ kind: "release", code: 1000, reason: "", ended: true }]);
  });
});

describe("the socket's end, holding for a resume, the gateway's stop", () => {
  const lost: ConnectionInput = { kind: "socket_closed", code: 1006, reason: "" };

  it("lost without a close frame (1006), a resumable connection holds its session; resume.ts reports the hold back", () => {
    given(live).when(lost).then([{ kind: "hold", code: 1006 }], "live");
    given(resumed).when(lost).then([{ kind: "hold", code: 1006 }]);
    const held = given(live, { kind: "hold", code: 1006 });
    expect(held.state.phase).toEqual({ status: "held", reason: null });
    expect(isDetached(held.state.phase)).toBe(true);
    expect(isConnected(held.state.phase)).toBe(false);
    given(live).when({ kind: "hold", code: 1006 }).then([{ kind: "release", code: 1006, reason: "", ended: false }], "held");
    // the socket's close after the hold changes nothing
    held.when(lost).then([], "held");
  });

  it("ends the session when it cannot be resumed: no credential, a server close, a close frame", () => {
    const ended = (code: number): ConnectionEffect[] => [{ kind: "end_vad", flush: false }, { kind: "release", code, reason: "", ended: true }];
    given(notOffered).when(lost).then(ended(1006), "closed");
    given(live, { kind: "stop", cause: "load_shed" }).when(lost).then(ended(1006), "closed");
    given(live).when({ kind: "socket_closed", code: 1000, reason: "" }).then(ended(1000), "closed");
    given(live, { kind: "socket_closed", code: 1000, reason: "" }).when({ kind: "socket_closed", code: 1000, reason: "" }).then([]);
  });

  it("another connection resumed the session: held first, then its socket closes 4409 session_taken_over", () => {
    const held = given(live, { kind: "hold", code: CLOSE.sessionTakenOver.code });
    const after = held.when({ kind: "stop", cause: "taken_over" }).then(closes(CLOSE.sessionTakenOver), "held");
    expect(closeReasonOf(after.phase)).toEqual(CLOSE.sessionTakenOver);
    expect(decideConnection({ kind: "stop", cause: "taken_over" }, after, limits).effects).toEqual([]);
  });

  it("the gateway stopping: a resumable session is held and told 1012 gateway_restarting; the rest close 1013 upstream_unavailable", () => {
    given(live).when({ kind: "gateway_stopping", natsHealthy: true }).then([{ kind: "hold", code: 1012 }, { kind: "close", reason: CLOSE.gatewayRestarting }]);
    given(live).when({ kind: "gateway_stopping", natsHealthy: false }).then(closes(CLOSE.upstreamUnavailable), "closing");
    given(notOffered).when({ kind: "gateway_stopping", natsHealthy: true }).then(closes(CLOSE.upstreamUnavailable));
    given(live, closeRequested).when({ kind: "gateway_stopping", natsHealthy: true }).then(closes(CLOSE.upstreamUnavailable));
  });
});

describe("a connection that no longer takes input", () => {
  const revoked: ConnectionInput = { kind: "stop", cause: "key_revoked" };
  const after = (...inputs: ConnectionInput[]) => given(live, ...inputs);

  it("after the server's close: no budget, no drain, no second close, no resume answer", () => {
    after(revoked).when({ kind: "budget_settled", audioMs: 10_001, allowanceMs: 10_000, budgetExhausted: true }).then([], "closing");
    after(revoked).when(closeRequested).then([], "closing");
    after(revoked).when({ kind: "door_frame_too_large" }).then([], "closing");
    after(revoked).when({ kind: "resume_failed" }).then([], "closing");
    after(revoked).when({ kind: "gateway_stopping", natsHealthy: true }).then([], "closing");
    after(revoked).when(counted(3_600_001)).then([]);
    after(revoked).when({ kind: "event_sent", result: 2, bufferedBytes: 0 }).then([]);
  });

  it("a forwarded event after the close still counts the items owed, and closes nothing", () => {
    const d = after(revoked).when(forwarded(true, 3));
    d.then([], "closing");
    expect(d.d.state.pendingItems).toBe(3);
  });

  it("held: a second hold, a revocation, a frame change nothing", () => {
    const held: ConnectionInput = { kind: "hold", code: 1006 };
    after(held).when(held).then([], "held");
    after(held).when(revoked).then([], "held");
    after(held).when(frame(640)).then([], "held");
  });

  it("a live connection taken over closes 4409 itself; session.resumed on a live one changes nothing", () => {
    given(live).when({ kind: "stop", cause: "taken_over" }).then(closes(CLOSE.sessionTakenOver), "closing");
    expect(given(live, { kind: "resumed", offered: false }).state.phase).toEqual({ status: "live", resumable: true });
    expect(given(notOffered, { kind: "resumed", offered: true }).state.phase).toEqual({ status: "live", resumable: false });
  });
});

describe("every close code of the spec (7.3), from one connection's inputs", () => {
  const cases: [CloseReason, Start, ConnectionInput[]][] = [
    [CLOSE.normal, live, [closeRequested, forwarded(true, 0)]],
    [CLOSE.sessionAudioLimit, live, [counted(3_600_001, { allowanceMs: 4_000_000 })]],
    [CLOSE.audioQuotaExhausted, live, [counted(10_001, { budgetExhausted: true })]],
    [CLOSE.sessionDurationLimit, live, [frame(640, { now: T0 + 7_199_000 }), swept(T0 + 7_200_001)]],
    [CLOSE.keyRevoked, live, [{ kind: "stop", cause: "key_revoked" }]],
    [CLOSE.frameTooLarge, live, [frame(limits.maxFrameBytes + 2)]],
    [CLOSE.clientError, live, [{ kind: "publish_failed", refused: true, natsHealthy: true }]],
    [CLOSE.upstreamUnavailable, live, [swept(T0 + 1000, { upstreamAvailable: false })]],
    [CLOSE.upstreamBackpressure, live, [{ kind: "stop", cause: "load_shed" }]],
    [CLOSE.clientBackpressure, live, [{ kind: "event_sent", result: 2, bufferedBytes: 0 }]],
    [CLOSE.idleTimeout, live, [swept(T0 + 30_001)]],
    [CLOSE.gatewayRestarting, live, [{ kind: "gateway_stopping", natsHealthy: true }]],
    [CLOSE.sessionTakenOver, live, [{ kind: "hold", code: 4409 }, { kind: "stop", cause: "taken_over" }]],
  ];
  it.each(cases)("%o", (reason, start, inputs) => {
    const last = inputs.at(-1)!;
    const { d } = given(start, ...inputs.slice(0, -1)).when(last);
    expect(d.effects).toContainEqual({ kind: "close", reason });
  });
});

describe("every resume refusal (docs/realtime.md, \"Resuming a session\")", () => {
  const secret = "s".repeat(32);
  const sid = "sess_0123456789abcdef01234567";
  const claims = { typ: "resume" as const, sid, kid: "key_a", own: "tenant-a", gen: 2, exp: T0 / 1000 + 60 };
  const entry = (over: Partial<SessionOwnership> = {}): SessionOwnership => ({ gen: 2, keyId: "key_a", ownerId: "tenant-a", gateway: null, heldBy: "gw_1", heldUntil: T0 + 30_000, graceMs: 30_000, at: T0, ...over });
  const ctx = { now: T0, gateway: "gw_2", gatewayGone: false, revoked: () => false };
  const caller = { keyId: "key_a", ownerId: "tenant-a" };
  const refusal = (f: () => unknown) => {
    try {
      const v = f() as { kind?: string; error?: { code: string; status: number } };
      return v?.kind === "refuse" ? `${v.error!.status} ${v.error!.code}` : "accepted";
    } catch (err) {
      return `${(err as { status: number }).status} ${(err as { code: string }).code}`;
    }
  };

  it("at the upgrade: the credential, the position, the owner, the key, the generation, the grace", () => {
    const credential = issueResumeCredential(secret, { sessionId: sid, keyId: "key_a", ownerId: "tenant-a", gen: 2 }, 60_000, T0);
    expect(refusal(() => readResumeCredential(secret, credential, T0))).toBe("accepted");
    expect(refusal(() => readResumeCredential(secret, credential.slice(0, -2), T0))).toBe("401 invalid_resume_credential");
    expect(refusal(() => readResumeCredential(secret, credential, T0 + 60_000))).toBe("410 resume_expired");
    expect(refusal(() => replayPositions("garbage", undefined))).toBe("400 resume_event_unknown");
    expect(refusal(() => replayPositions("evt_0", 2))).toBe("400 resume_event_unknown");
    expect(refusal(() => decideResume(claims, caller, entry(), ctx))).toBe("accepted");
    expect(refusal(() => decideResume(claims, { keyId: "key_b", ownerId: "tenant-b" }, entry(), ctx))).toBe("403 resume_forbidden");
    expect(refusal(() => decideResume(claims, caller, entry(), { ...ctx, revoked: (k) => k === "key_a" }))).toBe("403 resume_forbidden");
    expect(refusal(() => decideResume(claims, caller, entry({ gen: 3 }), ctx))).toBe("409 session_resumed_elsewhere");
    expect(refusal(() => decideResume(claims, caller, undefined, ctx))).toBe("410 resume_expired");
    expect(refusal(() => decideResume(claims, caller, entry({ heldUntil: T0 }), ctx))).toBe("410 resume_expired");
  });

  it("at the upgrade, the door: a session resumes only through the door it was opened on, and with a door state that reads", () => {
    const turnDetection = { type: "server_vad" as const, threshold: 0.5, prefix_padding_ms: 300, silence_duration_ms: 500 };
    const record = { config: { format: "pcm" as const, transcription: { model: "m" }, turnDetection, noiseReduction: null, include: null }, beta: false, expiresAt: T0 / 1000 + 60 };
    expect(refusal(() => restoredDoor(undefined, "native"))).toBe("accepted");
    expect(restoredDoor(JSON.parse(JSON.stringify(record)), "openai")).toEqual(record);
    expect(refusal(() => restoredDoor(record, "native"))).toBe("409 resume_wrong_door");
    expect(refusal(() => restoredDoor(undefined, "openai"))).toBe("409 resume_wrong_door");
    expect(refusal(() => restoredDoor({ config: {} }, "openai"))).toBe("410 resume_state_lost");
  });

  it("on the connection: audio before session.resumed, and a VAD that never answers", () => {
    given(resumed).when(frame(640)).then([{ kind: "refuse_frame", code: "resume_in_progress" }]);
    given(resumed).when({ kind: "resume_failed" }).then(closes(CLOSE.upstreamUnavailable));
  });
});
