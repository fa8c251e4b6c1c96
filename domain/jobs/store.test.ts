import { describe, expect, it } from "vitest";
import { evolve, initialJobState, type JobState } from "./decider";
import type { JobEvent } from "./events";
import { jobEventId } from "./store";
import { fetched, now, sliced, spec, started, submitted, transcribed } from "./test-fixtures";

const id = spec.workflowId;

/** The id of every event of `events`, each named on the state before it. */
function idsOf(events: JobEvent[]): string[] {
  let state: JobState = initialJobState;
  return events.map((e) => {
    const eventId = jobEventId(id, state, e);
    state = evolve(state, e);
    return eventId;
  });
}

describe("event ids of job.evt", () => {
  const error = { code: "transcription_failed", message: "x" };
  const failed = (step: string, attempt: number, delivery: number, final = false): JobEvent => ({
    type: "StepAttemptFailed",
    data: { step, attempt, delivery, error, final, at: now },
  });
  const jobFailed: JobEvent = { type: "JobFailed", data: { step: "transcribe_chunk_0", error, at: now } };
  const resumed: JobEvent = { type: "JobResumed", data: { attempt: 2, at: now } };
  const history: JobEvent[] = [
    submitted,
    started("fetch"),
    fetched,
    started("slice"),
    sliced,
    started("transcribe_chunk_0"),
    failed("transcribe_chunk_0", 1, 1),
    failed("transcribe_chunk_0", 1, 2, true),
    jobFailed,
    resumed,
    started("transcribe_chunk_0", 2),
    transcribed(0),
    started("transcribe_chunk_1"),
    started("transcribe_chunk_1", 2),
    transcribed(1),
    { type: "TranscriptAggregated", data: { segments: 2, at: now } },
    { type: "JobCompleted", data: { audioSeconds: 40, at: now } },
    started("webhook"),
    failed("webhook", 1, 1),
    { type: "WebhookDelivered", data: { attempt: 2, status: 200, at: now } },
  ];

  it("name each fact once on the job's timeline", () => {
    const ids = idsOf(history);
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids).toEqual([
      `${id}:submitted`,
      `${id}:fetch:1:started`,
      `${id}:fetch:1:done`,
      `${id}:slice:1:started`,
      `${id}:slice:1:done`,
      `${id}:transcribe_chunk_0:1:started`,
      `${id}:transcribe_chunk_0:1:1`,
      `${id}:transcribe_chunk_0:1:2`,
      `${id}:failed:0`,
      `${id}:resumed:2`,
      `${id}:transcribe_chunk_0:2:started`,
      `${id}:transcribe_chunk_0:2:done`,
      `${id}:transcribe_chunk_1:1:started`,
      `${id}:transcribe_chunk_1:2:started`,
      `${id}:transcribe_chunk_1:2:done`,
      `${id}:aggregate:1:done`,
      `${id}:completed`,
      `${id}:webhook:1:started`,
      `${id}:webhook:1:1`,
      `${id}:webhook:delivered`,
    ]);
  });

  it("are the same when the same fact is decided again, whatever its time", () => {
    const state = history.slice(0, 5).reduce<JobState>(evolve, initialJobState);
    const later = { ...transcribed(0), data: { ...transcribed(0).data, at: "2026-11-22T10:05:00.000Z" } } as JobEvent;
    expect(jobEventId(id, state, later)).toBe(jobEventId(id, state, transcribed(0)));
  });

  it("never take a step command's id (<id>:<step>:<attempt>, same stream)", () => {
    const commandIds = history.flatMap((e) => (e.type === "StepStarted" ? [`${id}:${e.data.step}:${e.data.attempt}`] : []));
    expect(idsOf(history).filter((x) => commandIds.includes(x))).toEqual([]);
  });

  it("a job failed again after a resume gets a new id", () => {
    expect(idsOf([submitted, jobFailed, resumed, jobFailed]).slice(1)).toEqual([`${id}:failed:0`, `${id}:resumed:2`, `${id}:failed:1`]);
  });
});
