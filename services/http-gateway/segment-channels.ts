import { MAX_TRANSCRIBED_CHANNELS, mergeChannels } from "../../domain/transcript/channels";
import { stitchPieces } from "../../domain/transcript/pieces";
import { shapeTranscription, type TranscriptPipeline } from "../../domain/transcript/pipeline";
import type { VerboseTranscription } from "../../schemas/transcription";
import { validationError } from "../../shared/errors";
import { startPieces, type PieceOutcome, type PiecesOptions, type PiecesRun } from "../../shared/workers/pieces-run";

/**
 * `multichannel=true` on the segment route (docs/segment-reference.md "Multichannel"): every
 * channel of the clip is its own pieces run (shared/workers/pieces-run.ts), all of them through the
 * process's fair scheduler under the request's id, so the channels are decoded at once
 * where engines are free and within the request's and the owner's share where not.
 * Without `multichannel` the clip (mixed down to mono by the decoder) is one run, as before.
 */
export interface ChannelRuns {
  /** One run per channel, in channel order. */
  readonly runs: readonly PiecesRun[];
  /** Pieces of every channel together (`X-Segment-Pieces`). */
  readonly count: number;
  /** Every channel's pieces, in channel order; rejects with the first failure of any. */
  all(): Promise<PieceOutcome[][]>;
}

/** 400 `too_many_channels` for a clip with more channels than one request may have transcribed apart. */
export function assertChannelCount(channels: number): void {
  if (channels > MAX_TRANSCRIBED_CHANNELS) {
    throw validationError("too_many_channels", `multichannel: the audio has ${channels} channels; at most ${MAX_TRANSCRIBED_CHANNELS} are transcribed apart (send fewer, or omit multichannel to mix them down)`, {
      param: "multichannel",
    });
  }
}

export function startChannels(options: Omit<PiecesOptions, "pcm" | "channel">, channels: readonly Int16Array[], multichannel: boolean): ChannelRuns {
  if (!multichannel) {
    // one run under the request's own signal: no sibling channel to stop
    const run = startPieces({ ...options, pcm: channels[0]! });
    return { runs: [run], count: run.count, all: () => run.all().then((pieces) => [pieces]) };
  }
  const controller = new AbortController();
  const onAbort = () => controller.abort(options.signal.reason);
  if (options.signal.aborted) onAbort();
  else options.signal.addEventListener("abort", onAbort, { once: true });
  // one channel failing stops its siblings too
  const runs = channels.map((pcm, channel) => startPieces({ ...options, signal: controller.signal, pcm, channel }));
  return {
    runs,
    count: runs.reduce((n, r) => n + r.count, 0),
    all: () =>
      Promise.all(runs.map((r) => r.all()))
        .catch((err: unknown) => {
          controller.abort(err);
          throw err;
        })
        .finally(() => options.signal.removeEventListener("abort", onAbort)),
  };
}

/**
 * The delivered transcript of every channel's pieces: each channel stitched and shaped
 * on its own (its pipeline ends with the channel label), then merged in time order. One
 * channel without `multichannel`: stitched and shaped as a mono clip always was.
 */
export function channelsTranscript(
  byChannel: readonly PieceOutcome[][],
  durationSeconds: number,
  pipelineFor: (formatted: boolean, channel?: number) => TranscriptPipeline,
  multichannel: boolean,
): VerboseTranscription {
  const shaped = byChannel.map((pieces, channel) => {
    const stitched = stitchPieces(pieces, durationSeconds);
    const transcribed = { ...stitched, duration: stitched.duration || durationSeconds };
    return shapeTranscription(pipelineFor(pieces.every((p) => p.formatted), multichannel ? channel : undefined), transcribed);
  });
  if (!multichannel) return shaped[0]!;
  return mergeChannels(
    shaped.map((result, channel) => ({ channel, result })),
    durationSeconds,
  );
}
