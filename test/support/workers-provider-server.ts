import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { parseWav } from "../../shared/audio/wav";

/**
 * A real local HTTP server standing in for an external OpenAI-compatible
 * transcription provider (we don't run one in tests). It parses the multipart upload,
 * measures the WAV it received and answers verbose_json naming itself and the clip's
 * duration, so tests can tell which provider answered and that the audio arrived
 * whole. Behaviour is switchable at run time: delay, failure status, cold (model
 * still loading: /v1/models answers 503).
 */
export interface ProviderServer {
  url: string;
  name: string;
  /** Transcription requests received, with the fields they carried. */
  requests: { model?: string; language?: string; prompt?: string; samples: number; auth?: string }[];
  /** `transcript`: answer this text (its words spread over the clip) instead of naming itself; `hear`: answer what it gives for the request's audio (16 kHz PCM); `timedWords`: answer these words with their times (seconds in the clip). */
  behaviour: { delayMs: number; failStatus?: number; cold: boolean; transcript?: string; hear?: (pcm: Int16Array) => string; timedWords?: (pcm: Int16Array) => { word: string; start: number; end: number }[] };
  /** Transcription requests being answered now, and the most there were at once. */
  inFlight: number;
  maxInFlight: number;
  close(): Promise<void>;
}

export async function startProviderServer(name: string): Promise<ProviderServer> {
  const state: ProviderServer = {
    url: "",
    name,
    requests: [],
    behaviour: { delayMs: 0, cold: false },
    inFlight: 0,
    maxInFlight: 0,
    close: async () => undefined,
  };
  const server: Server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = Buffer.concat(chunks);
    const send = (status: number, payload: unknown) => {
      res.writeHead(status, { "content-type": "application/json" });
      res.end(JSON.stringify(payload));
    };
    if (req.method === "GET" && req.url === "/v1/models") {
      if (state.behaviour.cold) return send(503, { error: { message: "model loading" } });
      return send(200, { object: "list", data: [{ id: "whisper-1", object: "model" }] });
    }
    if (req.method === "POST" && req.url === "/v1/audio/transcriptions") {
      const form = await new Request("http://x", { method: "POST", headers: req.headers as Record<string, string>, body }).formData();
      const file = form.get("file");
      const wav = file instanceof Blob ? parseWav(new Uint8Array(await file.arrayBuffer())) : undefined;
      const samples = wav ? wav.data.length / 2 : 0;
      state.requests.push({
        model: form.get("model")?.toString(),
        language: form.get("language")?.toString(),
        prompt: form.get("prompt")?.toString(),
        samples,
        auth: req.headers.authorization,
      });
      state.maxInFlight = Math.max(state.maxInFlight, ++state.inFlight);
      if (state.behaviour.delayMs) await new Promise((r) => setTimeout(r, state.behaviour.delayMs));
      state.inFlight--;
      if (res.destroyed) return;
      if (state.behaviour.failStatus) return send(state.behaviour.failStatus, { error: { message: `${name} failing` } });
      const duration = samples / 16_000;
      const pcm = wav ? new Int16Array(wav.data.buffer.slice(wav.data.byteOffset, wav.data.byteOffset + wav.data.byteLength)) : new Int16Array(0);
      const timed = state.behaviour.timedWords?.(pcm);
      const text = timed ? timed.map((w) => w.word).join(" ") : (state.behaviour.hear?.(pcm) ?? state.behaviour.transcript ?? `${name} heard ${duration.toFixed(2)} seconds`);
      return send(200, {
        task: "transcribe",
        language: "english",
        duration,
        text,
        segments: [{ id: 0, seek: 0, start: 0, end: duration, text: ` ${text}`, tokens: [1, 2], temperature: 0, avg_logprob: -0.2, compression_ratio: 1.1, no_speech_prob: 0.01 }],
        words: timed ?? text.split(" ").map((w, i, all) => ({ word: w, start: (i * duration) / all.length, end: ((i + 1) * duration) / all.length })),
      });
    }
    send(404, { error: { message: "not found" } });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  state.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  state.close = () =>
    new Promise((r) => {
      server.closeAllConnections();
      server.close(() => r());
    });
  return state;
}
