import { describe, expect, it } from "vitest";
import { pickChannel, splitChannels } from "./channels";

describe("splitChannels", () => {
  it("deinterleaves frames into one array per channel", () => {
    const interleaved = Int16Array.from([1, -1, 2, -2, 3, -3]);
    expect(splitChannels(interleaved, 2).map((c) => [...c])).toEqual([
      [1, 2, 3],
      [-1, -2, -3],
    ]);
    expect([...pickChannel(Int16Array.from([0, 1, 2, 10, 11, 12]), 3, 2)]).toEqual([2, 12]);
  });
  it("drops a trailing partial frame, and gives mono back as it is", () => {
    expect(splitChannels(Int16Array.from([1, 2, 3]), 2).map((c) => [...c])).toEqual([[1], [2]]);
    const mono = Int16Array.from([5, 6]);
    expect(splitChannels(mono, 1)[0]).toBe(mono);
  });
});
