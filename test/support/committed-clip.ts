import { execFileSync } from "node:child_process";
import WebSocket from "ws";
import { OPENAI_REALTIME_PATH } from "../../schemas/openai-realtime";
import { connectRt, streamPcm, wsUrl, type RtClient } from "./realtime-support";

/**
 * One clip as one manually committed realtime item (`turn_detection` `manual`; the OpenAI door's `null`), at a client
 * sample rate, through either door: the rate tests (test/realtime-rates.test.ts) and the
 * word error rate bench (bench/wer.ts).
 */
const T = "conversation.item.input_audio_transcription";

/** 16 kHz PCM16 at `rate` by ffmpeg's resampler (the client's own audio at that rate). */
export function atRate(pcm: Int16Array, rate: number): Int16Array {
  if (rate === 16000) return pcm;
  const args = ["-v", "error", "-f", "s16le", "-ar", "16000", "-ac", "1", "-i", "-", "-ar", String(rate), "-f", "s16le", "-"];
  const raw = execFileSync("ffmpeg", args, { input: Buffer.from(pcm.buffer, pcm.byteOffset, pcm.byteLength), maxBuffer: 1 << 28 });
  return new Int16Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.byteLength));
}

/** The item's transcript once it has an outcome; then closes the session. */
async function committedText(c: RtClient): Promise<string> {
  const done = (e: any) => e.type === `${T}.completed` || e.type === `${T}.failed`;
  for (const deadline = Date.now() + 120_000; !c.events.some(done); await new Promise((r) => setTimeout(r, 50))) {
    if (Date.now() > deadline) throw new Error(`no transcript: ${c.events.map((e) => e.type).join(", ")}`);
  }
  c.sendJson({ type: "session.close" });
  await c.closed;
  const failed = c.events.find((e) => e.type === `${T}.failed`);
  if (failed) throw new Error(`the item failed: ${JSON.stringify(failed.error)}`);
  return c.events.filter((e) => e.type === `${T}.completed`).map((e) => e.transcript).join(" ");
}

/** The native door at `?sample_rate=rate`: `pcm16k` taken to `rate`, sent in 20 ms frames as fast as the socket takes them, committed. */
export async function nativeCommitted(baseUrl: string, key: string, pcm16k: Int16Array, rate: number): Promise<string> {
  const c = await connectRt(wsUrl(baseUrl, `sample_rate=${rate}`), { authorization: `Bearer ${key}` });
  await c.next("session.created");
  c.sendJson({ type: "session.update", session: { turn_detection: { type: "manual" } } });
  await c.next("session.updated");
  await streamPcm(c, atRate(pcm16k, rate), { speed: Infinity, chunkBytes: (rate / 50) * 2 });
  c.sendJson({ type: "input_audio_buffer.commit" });
  return committedText(c);
}

/** The OpenAI door (`audio/pcm`, 24 kHz): `pcm16k` taken to 24 kHz, base64 appends of 40 ms, committed. */
export async function openAiCommitted(baseUrl: string, key: string, pcm16k: Int16Array): Promise<string> {
  const c = await connectRt(`${baseUrl.replace(/^http/, "ws")}${OPENAI_REALTIME_PATH}`, { authorization: `Bearer ${key}` });
  await c.next("session.created");
  c.sendJson({ type: "session.update", session: { type: "transcription", audio: { input: { turn_detection: null } } } });
  await c.next("session.updated");
  const pcm = atRate(pcm16k, 24000);
  const bytes = Buffer.from(pcm.buffer, pcm.byteOffset, pcm.byteLength);
  for (let at = 0; at < bytes.length && c.ws.readyState === WebSocket.OPEN; at += 1920) {
    c.sendJson({ type: "input_audio_buffer.append", audio: bytes.subarray(at, at + 1920).toString("base64") });
  }
  c.sendJson({ type: "input_audio_buffer.commit" });
  return committedText(c);
}
