import { describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "./config";

describe("config", () => {
  it("has embedded defaults and is frozen", () => {
    const config = loadConfig({});
    expect(config.http.port).toBe(8080);
    expect(config.nats.url).toBe("nats://127.0.0.1:4222");
    expect(config.objects.backend).toBe("fs");
    expect(config.workers.attemptTimeoutMs).toBe(800);
    expect(Object.isFrozen(config)).toBe(true);
    expect(Object.isFrozen(config.http)).toBe(true);
  });

  it("fails fast listing every problem", () => {
    try {
      loadConfig({ PORT: "seventy", NATS_PREFIX: "Bad Prefix", OBJECT_STORE: "ftp" });
      throw new Error("expected ConfigError");
    } catch (err) {
      expect(err).toBeInstanceOf(ConfigError);
      const message = (err as Error).message;
      expect(message).toContain("PORT");
      expect(message).toContain("NATS_PREFIX");
      expect(message).toContain("OBJECT_STORE");
    }
  });

  it("chooses how realtime sessions get partials: streaming decoders, re-decodes (whisper.cpp; an upstream only with RT_UPSTREAM_PARTIALS), or none", () => {
    expect(loadConfig({}).realtime.partials).toBe("decoders");
    expect(loadConfig({ WHISPER_MODEL_PATH: "/m.bin", WORKER_EMBEDDED: "none" }).realtime.partials).toBe("redecode");
    expect(loadConfig({ WORKER_OPENAI_URL: "http://127.0.0.1:9/v1" }).realtime).toMatchObject({ partials: null, streaming: false });
    expect(loadConfig({ WORKER_OPENAI_URL: "http://127.0.0.1:9/v1", RT_UPSTREAM_PARTIALS: "true" }).realtime).toMatchObject({ partials: "redecode", streaming: true });
    expect(loadConfig({ WHISPER_MODEL_PATH: "/m.bin", RT_STREAM_DECODERS: "0" }).realtime).toMatchObject({ partials: null, streaming: false });
  });
});
