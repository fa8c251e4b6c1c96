import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connectRt, fixture, refusal, streamPcm, wsUrl } from "./support/realtime-support";
import { startStack, type Stack } from "./support/stack";

/**
 * A continuous speaker between two utterances is still a speaker: admission's engine
 * headroom counts a streaming session whose last item was committed within the last
 * 3 s (services/vad/stream-items.ts `continuousSpeakers`), not only the items open at the
 * instant of the upgrade. Before, a speaker in the pause after an utterance counted as
 * nobody, and a session arriving then was admitted past the engine's room (with
 * continuous speakers, a fifth of them are in such a pause at any moment). A session
 * that has been silent longer is not a speaker, and the next one is admitted.
 *
 * The engine's share is set so low (1% of the machine) that one speaker fills it.
 */
let stack: Stack;
let key: string;

beforeAll(async () => {
  stack = await startStack({ RT_STREAM_DECODERS: "2", RT_ADMIT_MAX_ENGINE_SHARE: "0.01", RT_ENGINE_SPEAKER_CORES: "0.085" });
  key = (await stack.issueKey("pro")).key;
});
afterAll(async () => {
  await stack?.stop();
});

const auth = () => ({ authorization: `Bearer ${key}` });

describe("admission counts continuous speakers through their pauses", () => {
  it("a session arriving in a speaker's pause is refused 503 engine_busy with Retry-After; after 3 s of the speaker's silence it is admitted", async () => {
    const speaker = await connectRt(wsUrl(stack.baseUrl), auth());
    await speaker.next("session.created");
    await streamPcm(speaker, fixture("ldc93s1.wav"), { speed: 1 });
    await streamPcm(speaker, new Int16Array(16000 * 0.8), { speed: 1 });
    // the utterance is committed: nothing is open now, the speaker is in a pause
    await speaker.next("input_audio_buffer.committed");
    await speaker.next("conversation.item.input_audio_transcription.completed");
    const refused = await refusal(wsUrl(stack.baseUrl), auth());
    expect(refused.status).toBe(503);
    expect(refused.body.error.code).toBe("upstream_unavailable");
    expect(refused.body.error.message).toMatch(/cannot take another speaker.*1 speaker talking/);
    expect(Number(refused.headers["retry-after"])).toBeGreaterThanOrEqual(1);

    // silent for longer than a pause: no longer a speaker
    await streamPcm(speaker, new Int16Array(16000 * 4), { speed: 1 });
    const next = await connectRt(wsUrl(stack.baseUrl), auth());
    await next.next("session.created");
    next.ws.close(1000);
    speaker.ws.close(1000);
    await Promise.all([next.closed, speaker.closed]);
  });
});
