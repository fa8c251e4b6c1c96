import { describe, expect, it } from "vitest";
import { costSharers } from "./vad-consumer";

describe("costSharers: among how many the engine's load is one speaker's cost", () => {
  it("given a machine with room, decoders finishing committed utterances share the load: a long commit's decode is no speaker", () => {
    expect(costSharers(0.5, 3, 1)).toBe(3);
    expect(costSharers(0.5, 1, 4)).toBe(4);
  });
  it("given the engine past 75% of the machine, only the speakers share it: busy decoders past them are a backlog of starved decoders", () => {
    expect(costSharers(0.86, 29, 20)).toBe(20);
    expect(costSharers(0.75, 29, 20)).toBe(20);
    expect(costSharers(0.74, 29, 20)).toBe(29);
  });
});
