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
});
