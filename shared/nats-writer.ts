import { DataBuffer, ProtocolHandler } from "@nats-io/nats-core/internal";
import { natsPatchRuns } from "./metrics";

const PATCHED = Symbol.for("stt.nats.writeLargePayloadsInPlace");
/** Payloads from this size on are written as they are; smaller pieces are packed. */
const IN_PLACE_BYTES = 16 * 1024;

interface Outbound {
  buffers: Uint8Array[];
  size(): number;
  drain(): Uint8Array;
  reset(): void;
}

interface Handler {
  infoReceived: boolean;
  connected: boolean;
  outbound: Outbound;
  transport: { send(frame: Uint8Array): void; isClosed?: boolean; socket?: { cork(): void; uncork(): void } };
}

/**
 * nats.js writes what is pending on a connection by packing it into one new buffer: every
 * audio batch, transcribe command and worker request was copied into a fresh buffer of
 * its size on its way out (30 MB a second through the gateway at 1,000 realtime
 * sessions; fresh pages, and ArrayBuffer memory V8 counts toward its next full
 * collection). Once installed, pending pieces of IN_PLACE_BYTES or more go to the socket
 * as they are (one corked write, a writev) and only the small ones between them are
 * packed.
 *
 * The price: a large payload must not change until it is written. The service's large
 * publishes are buffers it never writes again, or hands back for reuse only once the
 * publish is acknowledged (the gateway's batches, the VAD's utterances), by which time
 * the server has read them. If nats.js's internals lack what this relies on, it is left
 * as it is and this returns false (shared/nats-patches.ts reports it). Each in-place
 * flush counts `stt_nats_patch_runs_total{patch="writer"}`, so a connection whose
 * fields no longer match (every flush falling back to nats.js's own) shows as a counter
 * that stays at 0 (test/nats-large-messages.test.ts checks it moves).
 */
export function writeLargePayloadsInPlace(): boolean {
  const proto = ProtocolHandler.prototype as unknown as Handler & { flushPending(): void; [PATCHED]?: true };
  if (proto[PATCHED]) return true;
  const flushPending = proto.flushPending;
  if (typeof flushPending !== "function" || !outboundIsDataBuffer()) return false;
  // the original writes `this.outbound` through `this.transport.send` once INFO came and connected
  const source = flushPending.toString();
  if (!/this\.outbound\b/.test(source) || !/this\.transport\.send\(/.test(source) || !/this\.infoReceived\b/.test(source) || !/this\.connected\b/.test(source)) return false;
  const runs = natsPatchRuns.labels("writer");
  proto.flushPending = function flushPendingInPlace(this: Handler): void {
    const out = this.outbound;
    const socket = this.transport?.socket;
    const buffers = out?.buffers;
    if (!this.infoReceived || !this.connected || !Array.isArray(buffers) || buffers.length < 2 || !socket || this.transport.isClosed || !buffers.some((b) => b.length >= IN_PLACE_BYTES)) {
      return flushPending.call(this);
    }
    const parts: Uint8Array[] = [];
    let run: Uint8Array[] = [];
    let runBytes = 0;
    const packRun = () => {
      if (run.length === 1) parts.push(run[0]!);
      else if (run.length > 1) {
        const packed = new Uint8Array(runBytes);
        let at = 0;
        for (const b of run) {
          packed.set(b, at);
          at += b.length;
        }
        parts.push(packed);
      }
      run = [];
      runBytes = 0;
    };
    for (const b of buffers) {
      if (b.length >= IN_PLACE_BYTES) {
        packRun();
        parts.push(b);
      } else {
        run.push(b);
        runBytes += b.length;
      }
    }
    packRun();
    out.reset();
    socket.cork();
    try {
      for (const p of parts) this.transport.send(p);
    } finally {
      socket.uncork();
    }
    runs.inc();
  };
  proto[PATCHED] = true;
  return true;
}

/** What the patch relies on in the outbound buffer: its pieces in `buffers`, emptied by `reset()`. */
function outboundIsDataBuffer(): boolean {
  const probe = new DataBuffer() as unknown as Partial<Outbound>;
  return Array.isArray(probe.buffers) && typeof probe.reset === "function" && typeof probe.drain === "function" && typeof probe.size === "function";
}
