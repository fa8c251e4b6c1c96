import { describe, expect, it } from "vitest";
import { AppError } from "../../shared/errors";
import { parseWebSocketProtocols, protocolToAnswer } from "./upgrade-credentials";

describe("parseWebSocketProtocols", () => {
  it("reads the key entry of OpenAI's browser offer (GA and beta)", () => {
    expect(parseWebSocketProtocols("realtime, openai-insecure-api-key.ek_abc.def")).toEqual({ protocols: ["realtime"], credential: "ek_abc.def", beta: false });
    expect(parseWebSocketProtocols("realtime,openai-insecure-api-key.sk-123,openai-beta.realtime-v1")).toEqual({
      protocols: ["realtime", "openai-beta.realtime-v1"],
      credential: "sk-123",
      beta: true,
    });
  });

  it("no header, no credential", () => {
    for (const header of [undefined, null, "", " , "]) expect(parseWebSocketProtocols(header)).toEqual({ protocols: [], credential: null, beta: false });
    expect(parseWebSocketProtocols("realtime")).toEqual({ protocols: ["realtime"], credential: null, beta: false });
  });

  it("refuses an empty or a second credential entry with 401 invalid_api_key", () => {
    for (const header of ["realtime, openai-insecure-api-key.", "openai-insecure-api-key.ek_a, openai-insecure-api-key.ek_b"]) {
      let thrown: unknown;
      try {
        parseWebSocketProtocols(header);
      } catch (err) {
        thrown = err;
      }
      expect(thrown).toBeInstanceOf(AppError);
      expect(thrown).toMatchObject({ status: 401, code: "invalid_api_key" });
    }
  });
});

describe("protocolToAnswer", () => {
  it("selects exactly realtime when offered, never the key entry", () => {
    expect(protocolToAnswer("realtime, openai-insecure-api-key.ek_secret")).toBe("realtime");
    expect(protocolToAnswer("openai-insecure-api-key.ek_secret, realtime, openai-beta.realtime-v1")).toBe("realtime");
    expect(protocolToAnswer("OPENAI-INSECURE-API-KEY.ek_secret")).toBe("");
  });

  it("otherwise the first other protocol, or none", () => {
    expect(protocolToAnswer("stt.v1, other")).toBe("stt.v1");
    expect(protocolToAnswer("")).toBe("");
    expect(protocolToAnswer(undefined)).toBe("");
    expect(protocolToAnswer("openai-insecure-api-key.x, openai-beta.realtime-v1")).toBe("openai-beta.realtime-v1");
  });
});
