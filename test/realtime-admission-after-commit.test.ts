import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { rtAdmissionsRefused } from "../shared/metrics";
import { concatPcm } from "./support/fixtures";
import { connectRt, fixture, streamPcm, wsUrl } from "./support/realtime-support";
import { startStack, type Stack } from "./support/stack";

/**
 * A lone session on an idle plane is admitted: after a session commits a long utterance
 * and closes, the next upgrade is admitted at once. It used to be refused 503 engine_busy
 * ("open_sessions: 0, admitted_recently: 1"): engine headroom added the streaming
 * decoders' measured CPU (the decode of the closed session's committed utterance, a
 * transient) and counted the closed session as a speaker still talking. Admission now
 * counts the speakers still talking (open utterances) and the sessions admitted lately
 * that are still open (domain/sessions/admission.ts).
 *
 * The stack runs the production engine bounds (RT_ADMIT_MAX_ENGINE_SHARE 0.6 and the
 * speaker cost prior), not the generous ones the test suite sets for other tests.
 */
let stack: Stack;
let key: string;

beforeAll(async () => {
  stack = await startStack({ RT_STREAM_DECODERS: "2", RT_ADMIT_MAX_ENGINE_SHARE: "0.6", RT_ENGINE_SPEAKER_CORES: "0.085" });
  key = (await stack.issueKey("pro")).key;
});
afterAll(async () => {
  await stack?.stop();
});

const auth = () => ({ authorization: `Bearer ${key}` });

async function refusedFor(reason: string): Promise<number> {
  return (await rtAdmissionsRefused.get()).values.find((v) => v.labels.reason === reason)?.value ?? 0;
}

describe("admission after a long committed utterance", () => {
  it("a session that commits 66 s of speech and closes leaves nobody talking: the next session is admitted at once, while its utterance is still decoded", async () => {
    const jfk = fixture("jfk.wav"); // 11 s
    const speech = concatPcm(...Array.from({ length: 6 }, () => jfk)); // 66 s
    const refusedBefore = (await refusedFor("engine_busy")) + (await refusedFor("engine_full"));

    const first = await connectRt(wsUrl(stack.baseUrl), auth());
    await first.next("session.created");
    first.sendJson({ type: "session.update", session: { turn_detection: { type: "manual" } } });
    expect((await first.next("session.updated")).session.turn_detection.type).toBe("manual");
    // as fast as it goes: the decoders catch up after the commit, as they do after a fast client's upload
    await streamPcm(first, speech, { speed: Infinity, chunkBytes: 32_000 });
    first.sendJson({ type: "input_audio_buffer.commit" });
    await first.next("input_audio_buffer.committed");
    // closed without waiting for the transcript: the decoders are still at the 66 s
    first.ws.close(1000);
    await first.closed;

    // at once: no retry, no wait
    const second = await connectRt(wsUrl(stack.baseUrl), auth()).catch((err) => {
      throw new Error(`the next session was refused: ${(err as Error).message} ${JSON.stringify((err as { body?: unknown }).body ?? null)}`);
    });
    await second.next("session.created");
    second.ws.close(1000);
    await second.closed;
    expect((await refusedFor("engine_busy")) + (await refusedFor("engine_full"))).toBe(refusedBefore);
  });
});
