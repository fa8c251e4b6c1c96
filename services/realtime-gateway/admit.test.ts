import { describe, expect, it } from "vitest";
import type { AppError } from "../../shared/errors";
import { parseAudioParams } from "./admit";

// The rest of admission (keys, tokens, breaker, backlog, rate, leases) is I/O against
// Postgres and NATS: test/realtime*.test.ts and test/rate-limit.test.ts run it for real.
describe("an upgrade's audio parameters", () => {
  const refusal = (query: string) => {
    try {
      parseAudioParams(query, 24000);
    } catch (e) {
      const err = e as AppError;
      return { code: err.code, param: err.param, status: err.status, message: err.message };
    }
    return null;
  };

  it("defaults: the configured sample rate, mono, no language", () => {
    expect(parseAudioParams("", 24000)).toEqual({ sampleRate: 24000, channels: 1, multichannel: false, language: null });
    expect(parseAudioParams("foo=bar", 16000)).toEqual({ sampleRate: 16000, channels: 1, multichannel: false, language: null });
  });

  it("takes each supported rate, stereo and an ISO language code with or without a region", () => {
    for (const rate of [8000, 16000, 24000, 48000]) expect(parseAudioParams(`sample_rate=${rate}`, 24000).sampleRate).toBe(rate);
    expect(parseAudioParams("channels=2", 24000).channels).toBe(2);
    expect(parseAudioParams("channels=1", 24000).channels).toBe(1);
    expect(parseAudioParams("language=en", 24000).language).toBe("en");
    expect(parseAudioParams("language=yue", 24000).language).toBe("yue");
    expect(parseAudioParams("language=pt-BR", 24000).language).toBe("pt-BR");
    expect(parseAudioParams("language=zh_Hant", 24000).language).toBe("zh_Hant");
  });

  it("refuses an unsupported rate, a channel count other than 1 or 2 and a malformed language, naming the parameter", () => {
    for (const q of ["sample_rate=44100", "sample_rate=", "sample_rate=16k", "sample_rate=16000.5"]) {
      expect(refusal(q)).toMatchObject({ code: "invalid_sample_rate", param: "sample_rate", status: 400 });
    }
    expect(refusal("sample_rate=44100")!.message).toContain("8000, 16000, 24000, 48000");
    for (const q of ["channels=0", "channels=3", "channels=", "channels=two"]) expect(refusal(q)).toMatchObject({ code: "invalid_channels", param: "channels" });
    expect(refusal("channels=3")!.message).toBe("channels must be 1 or 2 (interleaved).");
    expect(refusal("language=english")!.message).toBe("language must be an ISO-639-1 code such as 'en'.");
    for (const q of ["language=e", "language=english", "language=en-", "language=en-B", "language=en-abcdefghi", "language=1n", "language=en us", "language="]) {
      expect(refusal(q)).toMatchObject({ code: "invalid_language", param: "language" });
    }
    // anchored: a valid code inside a longer value is refused
    expect(refusal("language=xxen")).toMatchObject({ code: "invalid_language" });
    expect(refusal("language=en-US-x")).toMatchObject({ code: "invalid_language" });
  });
});
