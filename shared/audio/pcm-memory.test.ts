import { describe, expect, it } from "vitest";
import { createPcmMemory, PcmMemoryRefusal, SERVER_BUSY_RETRY_AFTER_SECONDS } from "./pcm-memory";

const refusal = (f: () => unknown) => {
  try {
    f();
  } catch (err) {
    return err as PcmMemoryRefusal;
  }
  throw new Error("not refused");
};

describe("the process's PCM memory", () => {
  it("admits holds up to the bound and refuses one that does not fit now with 503 server_busy and Retry-After", () => {
    const memory = createPcmMemory(1000);
    const a = memory.hold(600);
    const b = memory.hold(400);
    expect(memory.inUse()).toBe(1000);
    const busy = refusal(() => memory.hold(1));
    expect(busy).toBeInstanceOf(PcmMemoryRefusal);
    expect(busy).toMatchObject({ status: 503, code: "server_busy", retryable: true, headers: { "Retry-After": String(SERVER_BUSY_RETRY_AFTER_SECONDS) } });
    a.release();
    a.release(); // twice gives back nothing more
    expect(memory.inUse()).toBe(400);
    expect(memory.hold(600).bytes).toBe(600);
    b.release();
    expect(memory.inUse()).toBe(600);
  });

  it("refuses a clip bigger than the whole bound with 413 audio_too_long: waiting cannot help", () => {
    const memory = createPcmMemory(1000);
    expect(refusal(() => memory.hold(1001))).toMatchObject({ status: 413, code: "audio_too_long", retryable: false, param: "file" });
    const h = memory.hold(10);
    expect(refusal(() => h.resize(1001))).toMatchObject({ status: 413, code: "audio_too_long" });
    expect(memory.inUse()).toBe(10);
  });

  it("resizes a hold to the exact size: shrinking gives back, growing must fit beside the others", () => {
    const memory = createPcmMemory(1000);
    const probed = memory.hold(0); // the probe did not know the length
    const other = memory.hold(700);
    probed.resize(300);
    expect(memory.inUse()).toBe(1000);
    expect(refusal(() => probed.resize(301))).toMatchObject({ code: "server_busy" });
    expect(probed.bytes).toBe(300);
    probed.resize(100);
    expect(memory.inUse()).toBe(800);
    other.release();
    probed.release();
    probed.resize(500); // released: nothing to resize
    expect(memory.inUse()).toBe(0);
  });
});
