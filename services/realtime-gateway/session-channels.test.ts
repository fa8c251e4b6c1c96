import { describe, expect, it } from "vitest";
import type { AudioControl } from "../../schemas/realtime-internal";
import type { AudioBatcher, AudioPublisher } from "./audio-publisher";
import { openSessionAudio } from "./session-channels";

/** A batcher that records what each lane was handed (the real one publishes to JetStream). */
function recordingBatcher() {
  const lanes = new Map<string, { partition: number; audio: number[]; controls: AudioControl[] }>();
  const batcher = {
    session({ sessionId, partition }) {
      const lane = { partition, audio: [] as number[], controls: [] as AudioControl[] };
      lanes.set(sessionId, lane);
      return {
        pushAudio: (pcm: Int16Array) => lane.audio.push(...pcm),
        control: (m: AudioControl) => lane.controls.push(m),
        flush: () => undefined,
        overloadedForMs: () => 0,
        settled: async () => undefined,
        resumeAt: () => undefined,
        pendingAcks: 0,
        messagesPublished: 0,
      } satisfies AudioPublisher;
    },
  } as Pick<AudioBatcher, "session"> as AudioBatcher;
  return { batcher, lanes };
}

const SESSION = "sess_0123456789abcdef01234567";

describe("a session's audio as lanes to the VAD", () => {
  it("multichannel: one lane per channel, each with its own channel's 16 kHz audio; controls go to every lane", () => {
    const { batcher, lanes } = recordingBatcher();
    const audio = openSessionAudio({ sessionId: SESSION, sampleRate: 16000, channels: 2, multichannel: true, batcher, partitionOf: (id) => id.length, onFailure: () => undefined });
    expect(audio.lanes).toEqual([
      { id: "sess_ch0_0123456789abcdef01234567", channel: 0 },
      { id: "sess_ch1_0123456789abcdef01234567", channel: 1 },
    ]);
    expect(audio.billedChannels).toBe(2);
    audio.push(Int16Array.from([1, -1, 2, -2, 3, -3]));
    audio.control({ kind: "commit", event_id: null });
    expect(lanes.get(audio.lanes[0]!.id)!.audio).toEqual([1, 2, 3]);
    expect(lanes.get(audio.lanes[1]!.id)!.audio).toEqual([-1, -2, -3]);
    for (const lane of lanes.values()) expect(lane.controls).toEqual([{ kind: "commit", event_id: null }]);
  });

  it("without multichannel: one lane under the session's id, the channels mixed down", () => {
    const { batcher, lanes } = recordingBatcher();
    const audio = openSessionAudio({ sessionId: SESSION, sampleRate: 16000, channels: 2, multichannel: false, batcher, partitionOf: () => 0, onFailure: () => undefined });
    expect(audio.lanes).toEqual([{ id: SESSION }]);
    expect(audio.billedChannels).toBe(1);
    audio.push(Int16Array.from([10, 20, 30, 50]));
    expect(lanes.get(SESSION)!.audio).toEqual([15, 40]);
  });
});
