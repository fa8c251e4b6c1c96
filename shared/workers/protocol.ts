import type { NatsConnection } from "@nats-io/transport-node";
import { workerRequestHeader, type WorkerRequestHeader } from "../../schemas/segment";
import { validationError } from "../errors";

/**
 * Framing of a worker request on core NATS: [u32 LE header length][JSON header][PCM16].
 * Clips larger than the server's max payload travel separately: the header names a
 * `pullSubject` the caller answers, and the worker requests the PCM from it in pieces
 * of `chunkBytes` (`{"offset":n}` → bytes). Core NATS holds nothing, so audio never
 * lands in a stream.
 */
export function encodeWorkerRequest(header: WorkerRequestHeader, pcm?: Int16Array): Uint8Array {
  const json = Buffer.from(JSON.stringify(header), "utf8");
  const pcmBytes = pcm ? Buffer.from(pcm.buffer, pcm.byteOffset, pcm.byteLength) : Buffer.alloc(0);
  const out = Buffer.alloc(4 + json.length + pcmBytes.length);
  out.writeUInt32LE(json.length, 0);
  json.copy(out, 4);
  pcmBytes.copy(out, 4 + json.length);
  return out;
}

export function decodeWorkerRequest(data: Uint8Array): { header: WorkerRequestHeader; pcmBytes: Buffer } {
  const buf = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  if (buf.length < 4) throw validationError("bad_worker_request", "worker request too short");
  const n = buf.readUInt32LE(0);
  if (4 + n > buf.length) throw validationError("bad_worker_request", "worker request header truncated");
  const header = workerRequestHeader.parse(JSON.parse(buf.toString("utf8", 4, 4 + n)));
  return { header, pcmBytes: buf.subarray(4 + n) };
}

/** Copies bytes into an aligned Int16Array. */
export function toInt16(bytes: Uint8Array): Int16Array {
  const out = new Int16Array(Math.floor(bytes.byteLength / 2));
  new Uint8Array(out.buffer).set(bytes.subarray(0, out.length * 2));
  return out;
}

/** Room left for PCM in one message, with space for headers and the JSON header. */
export function inlineCapacity(nc: NatsConnection): number {
  const max = nc.info?.max_payload ?? 1024 * 1024;
  return max - 16 * 1024;
}

/** Worker side: fetches a clip's PCM from the caller's pull subject. */
export async function pullPcm(nc: NatsConnection, subject: string, samples: number, timeoutMs: number): Promise<Int16Array> {
  const total = samples * 2;
  // Pieces land in the clip's own Int16Array: one copy of it in memory, not two.
  const pcm = new Int16Array(samples);
  const out = new Uint8Array(pcm.buffer);
  let offset = 0;
  while (offset < total) {
    const msg = await nc.request(subject, JSON.stringify({ offset }), { timeout: timeoutMs });
    if (msg.data.length === 0) break;
    out.set(msg.data.subarray(0, total - offset), offset);
    offset += msg.data.length;
  }
  if (offset < total) throw validationError("bad_worker_request", "audio pull ended early");
  return pcm;
}

/** Caller side: serves a clip's PCM on `subject` until the returned stop() is called. */
export function servePcm(nc: NatsConnection, subject: string, pcm: Int16Array): () => void {
  const bytes = Buffer.from(pcm.buffer, pcm.byteOffset, pcm.byteLength);
  const chunk = inlineCapacity(nc);
  const sub = nc.subscribe(subject, {
    callback: (err, msg) => {
      if (err) return;
      let offset = 0;
      try {
        offset = Math.max(0, Number((JSON.parse(msg.string()) as { offset: number }).offset) || 0);
      } catch {
        offset = 0;
      }
      msg.respond(bytes.subarray(offset, offset + chunk));
    },
  });
  return () => sub.unsubscribe();
}
