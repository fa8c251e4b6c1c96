import { DenoBuffer, Parser, State } from "@nats-io/nats-core/internal";
import { BufferPool } from "./buffer-pool";
import { natsPatchRuns } from "./metrics";

const PATCHED = Symbol.for("stt.nats.preallocateSpanningMessages");

/**
 * nats.js reads a message that spans socket reads (every one over 64 KB: audio batches,
 * transcribe commands, worker requests) into a buffer the size of the first read's tail
 * that doubles as the rest arrives. A 200 KB audio batch cost about three times its
 * size in new buffers, fresh pages for each, and a copy per doubling: `perf` of the
 * gateway process at 600 realtime sessions put 13% of its CPU in page faults and 15% in
 * copies, most of them there (docs/benchmarks/realtime.md, "Capacity of the plane").
 *
 * Once installed, a message still being read after a socket read gets one buffer of its
 * whole size (the size is in its MSG/HMSG line), so every later read is copied once into
 * place. nats.js exports its parser for this (`@nats-io/nats-core/internal`); if a later
 * version's parser lacks what this relies on, it is left as it is and this returns false
 * (shared/nats-patches.ts reports it).
 */
export function preallocateSpanningMessages(): boolean {
  const proto = Parser.prototype as Parser & { [PATCHED]?: true };
  if (proto[PATCHED]) return true;
  const parse = proto.parse;
  if (typeof parse !== "function" || typeof DenoBuffer.prototype._reslice !== "function" || State.MSG_PAYLOAD === undefined) return false;
  // the fields the patched method reads are the ones the original parses into
  const source = parse.toString();
  if (!/this\.msgBuf\b/.test(source) || !/this\.ma\.size\b/.test(source) || !/this\.state\b/.test(source)) return false;
  const runs = natsPatchRuns.labels("parser");
  proto.parse = function parseIntoWholeMessage(this: Parser, buf: Uint8Array): void {
    parse.call(this, buf);
    const partial = this.msgBuf;
    if (this.state !== State.MSG_PAYLOAD || !partial || partial.capacity >= this.ma.size) return;
    const have = partial.bytes({ copy: false });
    if (have.byteLength > this.ma.size) return;
    const whole = new DenoBuffer(pool.take(this.ma.size));
    whole._reslice(have.byteLength);
    whole.bytes({ copy: false }).set(have);
    this.msgBuf = whole;
    runs.inc();
  };
  proto[PATCHED] = true;
  return true;
}

/**
 * Whole-message buffers come from a small pool: a consumer that is done with a message's
 * data (it handled it synchronously and kept only copies) hands the buffer back with
 * `releaseMessageData`, and the next large message is read into it. The VAD reads every
 * audio batch of its partitions this way (30 MB a second at 1,000 sessions): new buffers
 * for each were fresh pages to fault in and, counted by V8 as external memory, the main
 * trigger of its full collections. Buffers are sized in steps of 64 KiB, and the pool
 * (shared/buffer-pool.ts) keeps at most 8 MB. A message nobody releases is collected as
 * before.
 */
const pool = new BufferPool({ step: 64 * 1024, maxBytes: 8 * 1024 * 1024 });

/**
 * Hands a message's buffer back for the next large message. Only for data nothing refers
 * to any more (views of it included, such as `msg.data` and lazily decoded headers):
 * the next message overwrites it. Data not read into a pooled buffer is left alone.
 */
export function releaseMessageData(data: Uint8Array): void {
  pool.give(data.buffer);
}
