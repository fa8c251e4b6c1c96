import { execFileSync } from "node:child_process";
import { expect } from "vitest";
import { encodeWav } from "../../shared/audio/wav";
import { concatPcm } from "./fixtures";
import { serveAudio, submitJob, waitForJobEnd } from "./jobs-helpers";
import { connectRt, silence, streamPcm, wsUrl } from "./realtime-support";
import type { Stack } from "./stack";

/** Deterministic white noise of the given amplitude (a third of full scale by default). */
export function whiteNoise(seconds: number, amplitude = 10_000): Int16Array {
  let s = 99;
  const rand = () => ((s = (s * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff) * 2 - 1;
  return new Int16Array(seconds * 16_000).map(() => Math.round(rand() * amplitude));
}

/**
 * ffmpeg's noise generator (anoisesrc): brown and pink noise stand in for a room's
 * background, which the test data has no recording of.
 */
export function ffmpegNoise(seconds: number, color: "brown" | "pink", amplitude = 0.05): Int16Array {
  const out = execFileSync("ffmpeg", ["-loglevel", "error", "-f", "lavfi", "-i", `anoisesrc=d=${seconds}:c=${color}:r=16000:a=${amplitude}:s=7`, "-f", "s16le", "-ac", "1", "-"]);
  return new Int16Array(out.buffer.slice(out.byteOffset, out.byteOffset + out.length));
}

/** The clips without speech every engine must answer with nothing: digital silence, white noise, two room-like noises. */
export function noSpeechClips(): Array<[string, Int16Array]> {
  return [
    ["silence-2s", new Int16Array(2 * 16_000)],
    ["white noise 10 s", whiteNoise(10)],
    ["brown noise 30 s", ffmpegNoise(30, "brown")],
    ["pink noise 30 s", ffmpegNoise(30, "pink")],
  ];
}

/**
 * No words from silence or noise on any plane, through the public interface of a
 * started stack: each clip of `noSpeechClips` uploaded (empty text, billed), all of them
 * as one batch job (empty text), and white noise streamed to a realtime session and
 * committed (no delta with text, empty completed transcripts).
 */
export async function expectNoWordsFromNoise(stack: Stack, key: string, requestId: string): Promise<void> {
  const clips = noSpeechClips();
  for (const [name, pcm] of clips) {
    const form = new FormData();
    form.set("file", new Blob([new Uint8Array(encodeWav(pcm))]), `${name}.wav`);
    form.set("response_format", "json");
    const res = await stack.fetch("/v1/audio/transcriptions", { method: "POST", body: form, headers: { authorization: `Bearer ${key}` } });
    expect(res.status, name).toBe(200);
    const body = (await res.json()) as { text: string; usage: { seconds: number } };
    expect(body.text, `segment plane: ${name}`).toBe("");
    expect(body.usage.seconds, name).toBe(Math.ceil(pcm.length / 16_000));
  }
  const noiseServer = await serveAudio(encodeWav(concatPcm(...clips.map(([, pcm]) => pcm))));
  try {
    const { workflowId } = await submitJob(stack.fetch, key, { audio_url: `${noiseServer.url}/noise.wav`, request_id: requestId });
    const view = await waitForJobEnd(stack.fetch, key, workflowId, { timeoutMs: 120_000 });
    expect(view.status, JSON.stringify(view.error)).toBe("complete");
    expect(view.output!.result.text, "batch plane").toBe("");
  } finally {
    await noiseServer.stop();
  }
  // white noise: the VAD's own detector hears it as voice, so it reaches the commit
  const c = await connectRt(wsUrl(stack.baseUrl), { authorization: `Bearer ${key}` });
  await c.next("session.created");
  await streamPcm(c, whiteNoise(10), { speed: 4 });
  c.sendJson({ type: "input_audio_buffer.commit" });
  await streamPcm(c, silence(1.5), { speed: 4 });
  c.sendJson({ type: "session.close" });
  await c.closed;
  const said = c.events.filter((e) => e.type === "conversation.item.input_audio_transcription.completed").map((e) => e.transcript);
  expect(said.join(""), "realtime plane").toBe("");
  expect(c.events.filter((e) => e.type.endsWith(".delta") && e.delta).map((e) => e.delta)).toEqual([]);
}
