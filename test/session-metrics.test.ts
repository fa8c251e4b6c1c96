import { describe, expect, it } from "vitest";
import { VAD_TRAILING_MS } from "../schemas/realtime";
import { createSessionMetrics, PACING_WINDOW_MS } from "../services/realtime-gateway/session-metrics";
import { rtVadDecision } from "../shared/metrics";

/** VAD decision latency (ms) the session records for one speech_stopped, from a frame log. */
async function decisionLatency(frames: { at: number; audioMs: number }[], sentAt: number, decidingMs: number, silence: number | null = 500): Promise<number> {
  let clock = 0;
  const m = createSessionMetrics(() => clock);
  for (const f of frames) {
    clock = f.at;
    m.audio(640, f.audioMs);
  }
  clock = sentAt;
  const before = (await rtVadDecision.get()).values;
  const sum0 = before.find((v) => v.metricName?.endsWith("_sum"))?.value ?? 0;
  m.sent({ type: "input_audio_buffer.speech_stopped", event_id: "e", item_id: "item_1", audio_end_ms: decidingMs - (silence ?? 500) + VAD_TRAILING_MS }, silence);
  const after = (await rtVadDecision.get()).values;
  const sum1 = after.find((v) => v.metricName?.endsWith("_sum"))?.value ?? 0;
  m.closed(1000);
  return Math.round((sum1 - sum0) * 1000);
}

/** 20 ms frames sent in real time from t=0; `arrival` maps a frame's send time to when the gateway read it. */
function paced(count: number, arrival: (sent: number, i: number) => number = (t) => t) {
  return Array.from({ length: count }, (_, i) => ({ at: arrival((i + 1) * 20, i), audioMs: (i + 1) * 20 }));
}

describe("realtime session metrics: VAD decision latency", () => {
  it("given a semantic_vad session (no fixed silence), its decisions are not measured: the event does not tell where the decision was due", async () => {
    expect(await decisionLatency(paced(110), 2_040, 2_000, null)).toBe(0);
  });

  it("given frames read as they are sent, when speech_stopped goes out, then it is measured from the deciding frame's arrival", async () => {
    // deciding audio at 2,000 ms: frame 100 (ends at 2,000 ms) arrived at 2,000
    expect(await decisionLatency(paced(110), 2_040, 2_000)).toBe(40);
  });

  it("given the gateway's loop was busy and read a burst of frames late, then the wait in the socket is counted", async () => {
    // frames sent from 1,800 ms to 2,100 ms were read together at 2,100 (a 300 ms stall)
    const frames = paced(110, (t) => (t > 1_780 && t <= 2_100 ? 2_100 : t));
    expect(await decisionLatency(frames, 2_140, 2_000)).toBe(140);
  });

  it("given a client whose frames usually arrive 10 ms behind, then a rare early frame does not set the pace", async () => {
    // one frame in twenty arrives on time, the rest 10 ms behind the timeline
    const frames = paced(110, (t, i) => t + (i % 20 === 0 ? 0 : 10));
    // frame 99 ends at 2,000 ms of audio and arrived at 2,010
    expect(frames[99]!.at).toBe(2_010);
    expect(await decisionLatency(frames, 2_060, 2_000)).toBe(50);
  });

  it("given a client sending faster than real time, then latency runs from the arrival, not from an earlier 'due' time", async () => {
    // 20 ms of audio every 5 ms
    const frames = Array.from({ length: 200 }, (_, i) => ({ at: (i + 1) * 5, audioMs: (i + 1) * 20 }));
    // the frame ending at 2,000 ms arrived at 500
    expect(await decisionLatency(frames, 530, 2_000)).toBe(30);
  });

  it("given a client that paused sending for longer than the window, then the pause is not counted", async () => {
    // 1 s of audio in real time, then nothing for 3 s, then real time again
    const frames = paced(120, (t) => (t <= 1_000 ? t : t + 3_000));
    // the deciding frame (2,000 ms of audio) arrived at 5,000
    expect(await decisionLatency(frames, 5_050, 2_000)).toBe(50);
    expect(PACING_WINDOW_MS).toBeLessThan(3_000);
  });
});
