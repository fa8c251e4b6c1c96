import { DenoBuffer, Parser, State } from "@nats-io/nats-core/internal";

const PATCHED = Symbol.for("stt.nats.preallocateSpanningMessages");

/**
 * nats.js reads a message that spans socket reads (every one over 64 KB: audio batches,
 * transcribe commands, worker requests) into a buffer the size of the first read's tail
 * that doubles as the rest arrives. A 200 KB audio batch cost about three times its
 * size in new buffers, fresh pages for each, and a copy per doubling: `perf` of the
 * gateway process at 600 realtime sessions put 13% of its CPU in page faults and 15% in
 * copies, most of them there (docs/realtime.md, "Capacity of the plane").
 *
 * Once installed, a message still being read after a socket read gets one buffer of its
 * whole size (the size is in its MSG/HMSG line), so every later read is copied once into
 * place. nats.js exports its parser for this (`@nats-io/nats-core/internal`); if a later
 * version's parser lacks what this relies on, it is left as it is.
 */
export function preallocateSpanningMessages(): boolean {
  const proto = Parser.prototype as Parser & { [PATCHED]?: true };
  if (proto[PATCHED]) return true;
  const parse = proto.parse;
  if (typeof parse !== "function" || typeof DenoBuffer.prototype._reslice !== "function" || State.MSG_PAYLOAD === undefined) return false;
  proto.parse = function parseIntoWholeMessage(this: Parser, buf: Uint8Array): void {
    parse.call(this, buf);
    const partial = this.msgBuf;
    if (this.state !== State.MSG_PAYLOAD || !partial || partial.capacity >= this.ma.size) return;
    const have = partial.bytes({ copy: false });
    if (have.byteLength > this.ma.size) return;
    const whole = new DenoBuffer(new ArrayBuffer(this.ma.size));
    whole._reslice(have.byteLength);
    whole.bytes({ copy: false }).set(have);
    this.msgBuf = whole;
  };
  proto[PATCHED] = true;
  return true;
}
