import type { JobSlicingView, JobStepView } from "../../schemas/jobs";
import { stepChunkIndex, type ActiveJob } from "./decider";
import { effectiveSegmentSeconds, MAX_CHUNKS } from "./slicing";

/**
 * The poll view's parts derived from a job's folded state (schemas/jobs.ts `jobView`):
 * used by the projection for the `jobs` row and by the poll route when it answers from
 * the log before the projection has caught up, so both show the same thing.
 */

const stepOrder = (name: string): [number, number] => {
  const i = stepChunkIndex(name) ?? 0;
  if (name === "fetch") return [0, 0];
  if (name === "slice") return [1, 0];
  if (name.startsWith("transcribe_chunk_")) return [2, i];
  if (name === "aggregate") return [3, 0];
  if (name.startsWith("review_chunk_")) return [4, i];
  if (name === "review") return [5, 0];
  return [6, 0];
};

/** The poll view's `steps` array: pipeline order, chunk steps by index. */
export function stepsView(job: ActiveJob): JobStepView[] {
  return Object.entries(job.steps)
    .sort(([a], [b]) => {
      const [x, i] = stepOrder(a);
      const [y, j] = stepOrder(b);
      return x - y || i - j;
    })
    .map(([name, s]) => ({
      name,
      status: s.status,
      attempt: s.attempt,
      started_at: s.startedAt,
      ended_at: s.endedAt ?? null,
      error: s.error ?? null,
    }));
}

/** The poll view's `slicing`: the requested and the used slice length, and the cap. */
export function slicingView(job: ActiveJob): JobSlicingView {
  return {
    requested_segment_seconds: job.spec.segmentSeconds,
    segment_seconds: job.audio ? Math.round(effectiveSegmentSeconds(job.audio.durationSeconds, job.spec.segmentSeconds) * 1000) / 1000 : null,
    max_chunks: MAX_CHUNKS,
    chunk_count: job.chunks?.length ?? null,
  };
}
