import { describe, expect, it } from "vitest";
import { decodeG711 } from "./g711";

describe("G.711 decoding", () => {
  it("decodes µ-law's reference points (ITU-T G.711 table 2a)", () => {
    // 0xff and 0x7f are the two zeros; 0x80 / 0x00 the extremes
    expect(Array.from(decodeG711(Uint8Array.from([0xff, 0x7f, 0x80, 0x00, 0xfe, 0x7e]), "ulaw"))).toEqual([0, 0, 32124, -32124, 8, -8]);
  });
  it("decodes A-law's reference points (ITU-T G.711 table 1a)", () => {
    expect(Array.from(decodeG711(Uint8Array.from([0xd5, 0x55, 0xaa, 0x2a]), "alaw"))).toEqual([8, -8, 32256, -32256]);
  });
  it("is monotonic over each half of the µ-law code space", () => {
    const all = decodeG711(Uint8Array.from({ length: 128 }, (_, i) => 0x80 + i), "ulaw");
    for (let i = 1; i < all.length; i++) expect(all[i]!).toBeLessThanOrEqual(all[i - 1]!);
  });
});
