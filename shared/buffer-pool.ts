/**
 * Spare ArrayBuffers for the realtime path's large, short-lived buffers (audio batches,
 * whole NATS messages, utterances). V8 starts a full collection for every 64 MB of
 * ArrayBuffers allocated, and the VAD allocated about 90 MB a second at 1,000 sessions,
 * each a fresh set of pages to fault in; handing buffers back for the next use is what
 * keeps that down (docs/benchmarks/realtime.md, "1,000 sessions").
 *
 * Buffers come in sizes of whole `step`s. `take` hands out a spare one of the size asked
 * or up to `slack` times it, else a new one; `give` takes back only buffers this pool
 * handed out, once, while it holds under `maxBytes` of spares (the rest are left to the
 * collector). A buffer given back must have nothing left that reads or writes it.
 */
export interface BufferPoolOptions {
  step: number;
  maxBytes: number;
  /** A spare buffer up to this many times the size asked will do (default 1: the same size). */
  slack?: number;
}

export class BufferPool {
  private readonly free = new Map<number, ArrayBuffer[]>();
  private readonly issued = new WeakSet<ArrayBufferLike>();
  private readonly spare = new WeakSet<ArrayBufferLike>();
  private bytes = 0;

  constructor(private readonly options: BufferPoolOptions) {}

  /** A buffer of at least `bytes` (what it held before is not cleared). */
  take(bytes: number): ArrayBuffer {
    const { step, slack = 1 } = this.options;
    const steps = Math.max(1, Math.ceil(bytes / step));
    for (let s = steps; s <= Math.ceil(steps * slack); s++) {
      const b = this.free.get(s)?.pop();
      if (b) {
        this.bytes -= b.byteLength;
        this.spare.delete(b);
        return b;
      }
    }
    const fresh = new ArrayBuffer(steps * step);
    this.issued.add(fresh);
    return fresh;
  }

  /** Takes `buffer` back for a later `take`; a buffer from elsewhere, or one given back already, is ignored. */
  give(buffer: ArrayBufferLike): void {
    if (!this.issued.has(buffer) || this.spare.has(buffer) || this.bytes + buffer.byteLength > this.options.maxBytes) return;
    const steps = buffer.byteLength / this.options.step;
    this.spare.add(buffer);
    this.bytes += buffer.byteLength;
    const list = this.free.get(steps);
    if (list) list.push(buffer as ArrayBuffer);
    else this.free.set(steps, [buffer as ArrayBuffer]);
  }

  /** Bytes held in spare buffers. */
  get spareBytes(): number {
    return this.bytes;
  }
}
