import { describe, expect, it } from "vitest";
import { assertProbeFits, probeWavHeader, trustedDuration, type AudioProbe } from "./probe";
import { encodeWav } from "./wav";

interface Header {
  rate?: number;
  channels?: number;
  bits?: number;
  code?: number;
  dataBytes?: number;
  /** What the data chunk's size field says (default: the bytes written). */
  declared?: number;
  /** 40-byte WAVE_FORMAT_EXTENSIBLE fmt chunk with this sub-format code. */
  subformat?: number;
}

/** A RIFF/WAVE file written field by field, so headers can lie. */
function wav({ rate = 16_000, channels = 1, bits = 16, code = 1, dataBytes = 0, declared = dataBytes, subformat }: Header): Uint8Array {
  const fmtSize = subformat === undefined ? 16 : 40;
  const out = Buffer.alloc(12 + 8 + fmtSize + 8 + dataBytes);
  out.write("RIFF", 0, "ascii");
  out.writeUInt32LE(Math.min(0xffffffff, 4 + 8 + fmtSize + 8 + declared), 4);
  out.write("WAVE", 8, "ascii");
  out.write("fmt ", 12, "ascii");
  out.writeUInt32LE(fmtSize, 16);
  out.writeUInt16LE(subformat === undefined ? code : 0xfffe, 20);
  out.writeUInt16LE(channels, 22);
  out.writeUInt32LE(rate, 24);
  // Derived fields wrap like a hand-made hostile header would: the probe ignores them.
  out.writeUInt32LE(((rate * channels * bits) / 8) % 2 ** 32, 28);
  out.writeUInt16LE(((channels * bits) / 8) % 2 ** 16, 32);
  out.writeUInt16LE(bits, 34);
  if (subformat !== undefined) {
    out.writeUInt16LE(22, 36);
    out.writeUInt16LE(bits, 38);
    out.writeUInt16LE(subformat, 44);
  }
  const data = 20 + fmtSize;
  out.write("data", data, "ascii");
  out.writeUInt32LE(declared, data + 4);
  return out;
}

describe("probeWavHeader", () => {
  it("refuses the hostile 7 KB WAV that declares 1 Hz, before anything decodes it", () => {
    expect(() => probeWavHeader(wav({ rate: 1, dataBytes: 7200 }))).toThrow(
      expect.objectContaining({ status: 415, code: "unsupported_audio", message: expect.stringMatching(/1 Hz.*8000–384000 Hz/) }),
    );
  });

  it("refuses rates below 8 kHz and above 384 kHz, accepts the bounds", () => {
    for (const rate of [0, 4_000, 7_999, 384_001, 4_000_000_000]) {
      expect(() => probeWavHeader(wav({ rate, dataBytes: 100 })), `${rate} Hz`).toThrow(expect.objectContaining({ code: "unsupported_audio" }));
    }
    expect(probeWavHeader(wav({ rate: 8_000, dataBytes: 16_000 }))).toMatchObject({ sampleRate: 8_000, durationSeconds: 1, durationSource: "exact" });
    expect(probeWavHeader(wav({ rate: 384_000, dataBytes: 768_000 }))).toMatchObject({ sampleRate: 384_000, durationSeconds: 1 });
  });

  it("refuses zero or absurd channel counts", () => {
    for (const channels of [0, 65, 65_535]) {
      expect(() => probeWavHeader(wav({ channels, dataBytes: 100 })), `${channels} channels`).toThrow(expect.objectContaining({ code: "unsupported_audio" }));
    }
  });

  it("counts the duration from the bytes present, not from a header that claims hours", () => {
    const claimsAnHour = wav({ rate: 16_000, dataBytes: 7200, declared: 3600 * 32_000 });
    expect(probeWavHeader(claimsAnHour)).toEqual({ format: "wav", sampleRate: 16_000, channels: 1, durationSeconds: 0.225, durationSource: "exact" });
    // Streaming writers leave 0 or 0xffffffff in the size field.
    expect(probeWavHeader(wav({ dataBytes: 32_000, declared: 0 }))?.durationSeconds).toBe(1);
    expect(probeWavHeader(wav({ dataBytes: 32_000, declared: 0xffffffff }))?.durationSeconds).toBe(1);
    // A size smaller than the bytes present (trailing chunks) is honoured.
    expect(probeWavHeader(wav({ dataBytes: 32_000, declared: 16_000 }))?.durationSeconds).toBe(0.5);
  });

  it("reads a canonical file, stereo float, A-law and WAVE_FORMAT_EXTENSIBLE PCM exactly", () => {
    expect(probeWavHeader(encodeWav(new Int16Array(8_000)))).toMatchObject({ durationSeconds: 0.5, durationSource: "exact" });
    expect(probeWavHeader(wav({ rate: 48_000, channels: 2, bits: 32, code: 3, dataBytes: 384_000 }))?.durationSeconds).toBe(1);
    expect(probeWavHeader(wav({ rate: 8_000, bits: 8, code: 6, dataBytes: 8_000 }))?.durationSeconds).toBe(1);
    expect(probeWavHeader(wav({ rate: 44_100, channels: 2, bits: 24, subformat: 1, dataBytes: 44_100 * 6 }))?.durationSeconds).toBe(1);
  });

  it("checks the rate of a compressed WAV but leaves its duration to ffprobe", () => {
    const adpcm = probeWavHeader(wav({ rate: 22_050, bits: 4, code: 0x11, dataBytes: 1000 }));
    expect(adpcm).toEqual({ format: "wav", sampleRate: 22_050, channels: 1 });
    expect(trustedDuration(adpcm!)).toBeUndefined();
    expect(() => probeWavHeader(wav({ rate: 2, bits: 4, code: 0x11, dataBytes: 1000 }))).toThrow(expect.objectContaining({ code: "unsupported_audio" }));
  });

  it("415 for a whole file that is RIFF/WAVE but truncated inside its header", () => {
    const full = wav({ dataBytes: 100 });
    expect(() => probeWavHeader(full.subarray(0, 30))).toThrow(expect.objectContaining({ code: "unsupported_audio", message: expect.stringMatching(/fmt/) }));
    expect(() => probeWavHeader(full.subarray(0, 40))).toThrow(expect.objectContaining({ code: "unsupported_audio", message: expect.stringMatching(/no data chunk/) }));
  });

  it("undefined for what is not RIFF/WAVE, and for a file prefix whose chunks do not fit in it", () => {
    expect(probeWavHeader(new TextEncoder().encode("ID3 definitely an mp3"))).toBeUndefined();
    expect(probeWavHeader(new Uint8Array(0))).toBeUndefined();
    const full = wav({ dataBytes: 100, declared: 32_000 });
    expect(probeWavHeader(full.subarray(0, 30), full.length)).toBeUndefined();
    // A prefix that holds the header is enough: the duration comes from the total size.
    expect(probeWavHeader(full.subarray(0, 44), 44 + 32_000)?.durationSeconds).toBe(1);
  });
});

describe("assertProbeFits", () => {
  const probe = (durationSeconds: number, durationSource: AudioProbe["durationSource"]): AudioProbe => ({
    format: "mp3",
    sampleRate: 44_100,
    channels: 1,
    durationSeconds,
    durationSource,
  });

  it("refuses an exact or stated length over the limit with 413 audio_too_long", () => {
    expect(() => assertProbeFits(probe(905.2, "header"), 900)).toThrow(
      expect.objectContaining({ status: 413, code: "audio_too_long", message: "audio is 905.2 s; this plan allows at most 900 s per request" }),
    );
    expect(() => assertProbeFits(probe(901, "exact"), 900)).toThrow(expect.objectContaining({ code: "audio_too_long" }));
    expect(() => assertProbeFits(probe(900, "exact"), 900)).not.toThrow();
  });

  it("does not refuse on a bitrate guess (the bounded decode decides) nor without a limit", () => {
    expect(() => assertProbeFits(probe(5000, "estimate"), 900)).not.toThrow();
    expect(() => assertProbeFits(probe(5000, "header"), undefined)).not.toThrow();
  });
});
