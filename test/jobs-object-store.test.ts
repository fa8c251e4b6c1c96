import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createFsObjectStore, createS3ObjectStore, getJson, putJson, type ObjectStore } from "../shared/objects";
import { startLocalS3, type LocalS3 } from "./support/jobs-helpers";

// The same contract run against both real backends: a temp directory and s3rver.
let s3: LocalS3;
let dir: string;
const stores: Record<string, ObjectStore> = {};

beforeAll(async () => {
  s3 = await startLocalS3();
  dir = await mkdtemp(join(tmpdir(), "objects-"));
  stores.fs = await createFsObjectStore(join(dir, "store"));
  stores.s3 = await createS3ObjectStore({
    endpoint: s3.endpoint,
    region: "us-east-1",
    bucket: s3.bucket,
    accessKeyId: "S3RVER",
    secretAccessKey: "S3RVER",
    forcePathStyle: true,
  });
});

afterAll(async () => {
  for (const s of Object.values(stores)) await s.close();
  await s3?.stop();
  await rm(dir, { recursive: true, force: true });
});

describe.each(["fs", "s3"])("%s object store", (name) => {
  const store = () => stores[name]!;

  it("round-trips bytes and JSON, and reads missing objects as undefined", async () => {
    await store().put("transcription/r1/chunk_0.json", JSON.stringify({ a: 1 }));
    await putJson(store(), "transcription/r1/result.json", { segments: [1, 2] });
    expect(await getJson(store(), "transcription/r1/chunk_0.json")).toEqual({ a: 1 });
    expect(await getJson(store(), "transcription/r1/result.json")).toEqual({ segments: [1, 2] });
    expect(await store().get("transcription/r1/nope.json")).toBeUndefined();
    expect(await store().head("transcription/r1/nope.json")).toBeUndefined();
    expect(await store().head("transcription/r1/chunk_0.json")).toEqual({ size: 7 });
  });

  it("reads byte ranges", async () => {
    const bytes = Buffer.from(Array.from({ length: 1000 }, (_, i) => i % 256));
    await store().put("transcription/r2/audio.pcm", bytes);
    expect((await store().getRange("transcription/r2/audio.pcm", 10, 20))!.equals(bytes.subarray(10, 20))).toBe(true);
    expect((await store().getRange("transcription/r2/audio.pcm", 990, 2000))!.equals(bytes.subarray(990))).toBe(true);
    expect(await store().getRange("transcription/r2/missing.pcm", 0, 10)).toBeUndefined();
  });

  it("streams a file in, lists by prefix and deletes a prefix", async () => {
    const file = join(dir, `${name}-big.bin`);
    const big = Buffer.alloc(3 * 1024 * 1024, 7);
    await writeFile(file, big);
    await store().putFile("transcription/r3/audio.pcm", file);
    await store().put("transcription/r3/chunk_1.json", "{}");
    await store().put("transcription/r30/chunk_1.json", "{}");
    expect((await store().get("transcription/r3/audio.pcm"))!.length).toBe(big.length);
    expect(await store().list("transcription/r3/")).toEqual(["transcription/r3/audio.pcm", "transcription/r3/chunk_1.json"]);
    await store().deletePrefix("transcription/r3/");
    expect(await store().list("transcription/r3/")).toEqual([]);
    expect(await store().list("transcription/r30/")).toEqual(["transcription/r30/chunk_1.json"]);
  });

  it("rejects keys that could escape the store", async () => {
    for (const key of ["../etc/passwd", "/abs", "a//b", "a/../b", "a/./b", "", "a b"]) {
      await expect(store().put(key, "x")).rejects.toMatchObject({ code: "invalid_object_key" });
    }
  });
});
