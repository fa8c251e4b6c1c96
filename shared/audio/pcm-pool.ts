import { BufferPool } from "../buffer-pool";

/**
 * The segmenters' audio buffers, shared by the sessions of a process (shared/buffer-pool.ts):
 * a buffer grown for one session's utterance goes on to hold another's once that
 * utterance is published. New buffers per utterance (room for it up front, a copy of it
 * at the end, a smaller one after it) were 35 MB a second at 1,000 sessions. Sizes go in
 * steps of 8,192 samples; a spare up to half again the size asked will do (any larger
 * would let every session's buffer drift up to the longest utterance's); at most 16 MB
 * of spares.
 */
export interface PcmPool {
  /** A buffer of at least `samples` (what it held before is not cleared). */
  take(samples: number): Int16Array;
  give(buffer: Int16Array): void;
}

export function createPcmPool(): PcmPool {
  const pool = new BufferPool({ step: 8192 * 2, maxBytes: 16 * 1024 * 1024, slack: 1.5 });
  return {
    take: (samples) => new Int16Array(pool.take(samples * 2)),
    give: (buffer) => pool.give(buffer.buffer),
  };
}
