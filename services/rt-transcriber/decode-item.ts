import { pieceCutter, stitchPieces, type PiecePolicy } from "../../domain/transcript/pieces";
import { createPieceScheduler, startPieces } from "../../shared/workers/pieces-run";
import type { FairScheduler } from "../../shared/workers/fair-scheduler";
import type { TranscribeRequest, TranscribeResult, WorkerRouter } from "../../shared/workers/types";

const SAMPLE_RATE = 16_000;

/** What an item's decode is for: the router request besides its audio, and whose turn its pieces take. */
export interface ItemDecode {
  request: Omit<TranscribeRequest, "pcm" | "signal" | "fallbackOnly" | "timeoutMs">;
  owner: string;
  itemId: string;
  /** The item's turn was granted to the fallback provider (the engines are saturated): one request there, whole. */
  fallbackOnly: boolean;
}

/**
 * A committed realtime item decoded the way the segment plane decodes a clip of the same
 * length (docs/design/realtime.md "Committed items"): a long item (SEGMENT_SPLIT_MIN_SECONDS or
 * more; a push-to-talk turn, an OpenAI client with `turn_detection: null`) is cut at its
 * pauses into pieces decoded at once by free engines and stitched, with the same cutter,
 * runner and settings (domain/transcript/pieces.ts, shared/workers/pieces-run.ts). A
 * short item, or one sent to the fallback provider, is one request as before. The
 * pieces take turns with other long items of this replica in a scheduler of their own,
 * sized like the segment gateway's by what the warm workers announce.
 */
export function createItemDecoder(policy: PiecePolicy & { inFlight: number }) {
  let scheduler: FairScheduler | undefined;
  return async (router: WorkerRouter, pcm: Int16Array, item: ItemDecode): Promise<TranscribeResult> => {
    if (item.fallbackOnly || pcm.length < policy.splitMinSeconds * SAMPLE_RATE) return router.transcribe({ ...item.request, pcm, fallbackOnly: item.fallbackOnly });
    scheduler ??= createPieceScheduler(router);
    const started = performance.now();
    const run = startPieces({ router, scheduler, cut: pieceCutter(policy), inFlight: policy.inFlight, pcm, request: item.request, signal: new AbortController().signal, owner: item.owner, requestId: item.itemId });
    const pieces = await run.all();
    return {
      result: stitchPieces(pieces, pcm.length / SAMPLE_RATE),
      workerId: [...new Set(pieces.map((p) => p.workerId))].join(", "),
      fallbackUsed: pieces.some((p) => p.fallbackUsed),
      formatted: pieces.every((p) => p.formatted),
      workerMs: pieces.length === 1 ? pieces[0]!.workerMs : performance.now() - started,
    };
  };
}
