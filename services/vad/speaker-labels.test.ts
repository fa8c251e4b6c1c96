import { describe, expect, it } from "vitest";
import type { UtteranceCommand } from "../../schemas/realtime-internal";
import { fixture } from "../../test/support/realtime-support";
import { withSpeakers, type SessionSpeakers } from "./speaker-labels";

const command: UtteranceCommand = {
  session_id: "sess_1",
  item_id: "item_1",
  key_id: "key_1",
  audio_start_ms: 0,
  audio_end_ms: 11_000,
  language: null,
  prompt: null,
  model: null,
  max_concurrent_utterances: 1,
  decided_at: 0,
};

describe("withSpeakers: an item's speaker, and what labelling it cost", () => {
  it("given diarize, labels the item speaker_0 and adds its labelling time to what the VAD counts per speaker", async () => {
    const session: { speakers: SessionSpeakers | null } = { speakers: null };
    const spent = { ms: 0 };
    const kept: unknown[] = [];
    const labelled = await withSpeakers(session, { diarize: true }, command, fixture("jfk.wav"), { spent, saved: (s) => kept.push(s) });
    expect(labelled.command.speaker).toBe("speaker_0");
    // features and the frame VAD over 11 s of speech: some milliseconds, not nothing
    expect(spent.ms).toBeGreaterThan(1);
    // and the speakers after it are handed on to be kept for a takeover
    expect(kept).toEqual([session.speakers!.state]);
  });
  it("given no diarize, labels nothing and costs nothing", async () => {
    const spent = { ms: 0 };
    const labelled = await withSpeakers({ speakers: null }, {}, command, fixture("jfk.wav"), { spent, saved: () => expect.unreachable() });
    expect(labelled.command.speaker).toBeUndefined();
    expect(spent.ms).toBe(0);
  });
});
