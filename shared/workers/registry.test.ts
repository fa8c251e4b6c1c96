import { describe, expect, it } from "vitest";
import type { WorkerAnnouncement } from "../../schemas/segment";
import { announcedCapacity, capacityOf, warmCapacity } from "./registry";

const worker = (over: Partial<WorkerAnnouncement>): WorkerAnnouncement => ({
  id: "w",
  kind: "pocketsphinx",
  models: ["stt-1"],
  languages: ["*"],
  warm: true,
  inFlight: 0,
  concurrency: 2,
  realTimeFactor: 0.3,
  host: "h",
  at: 0,
  ...over,
});

describe("announced engine capacity", () => {
  it("carries concurrency clips at once and concurrency ÷ real-time factor streams", () => {
    expect(announcedCapacity(2, 0.3)).toEqual({ requests: 2, streams: 6.6 });
    expect(announcedCapacity(1, 2)).toEqual({ requests: 1, streams: 0.5 });
  });

  it("derives it for a worker that does not announce it, and sums only warm workers", () => {
    expect(capacityOf(worker({}))).toEqual({ requests: 2, streams: 6.6 });
    const total = warmCapacity([worker({ capacity: { requests: 8, streams: 80 } }), worker({}), worker({ warm: false })]);
    expect(total).toEqual({ requests: 10, streams: 86.6, workers: 2 });
  });
});
