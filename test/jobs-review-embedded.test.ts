import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "./support/stack";
import { createObjectStore, getJson } from "../shared/objects/index";
import { artifactKeys, reviewChunkArtifact, type WebhookPayload } from "../schemas/jobs";
import { randomHex, readBody, startHttp, startLocalS3, waitFor, waitForJobEnd, type LocalHttp, type LocalS3 } from "./support/jobs-helpers";

// `review: true` with no REVIEW_LLM_URL: the embedded reviewer runs both stages, on
// both object stores. The clip is LibriVox speech the embedded engine transcribes as
// "and mr john guess would have been at leisure …"; the job's metadata names
// "John Dashwood", which the reviewer must restore (after checking it against the
// slice's audio from the object store), and carries distractors it must leave out.
const CLIP = readFileSync("/usr/share/pocketsphinx/test/data/librivox/sense_and_sensibility_01_austen_64kb-0870.wav");
const METADATA = { characters: ["John Dashwood", "Elinor", "Marianne", "Willoughby"], known_terms: ["Norland Park", "metformin"] };

let audioServer: LocalHttp;
let hookServer: LocalHttp;
const hooks: string[] = [];

beforeAll(async () => {
  audioServer = await startHttp((_req, res) => {
    res.writeHead(200, { "content-type": "audio/wav" });
    res.end(CLIP);
  });
  hookServer = await startHttp(async (req, res) => {
    hooks.push((await readBody(req)).toString());
    res.writeHead(200);
    res.end("ok");
  });
});

afterAll(async () => {
  for (const s of [audioServer, hookServer]) await s?.stop();
});

describe.each(["fs", "s3"])("embedded review on the %s object store", (backend) => {
  let s3: LocalS3 | undefined;
  let stack: Stack;

  beforeAll(async () => {
    if (backend === "s3") s3 = await startLocalS3();
    stack = await startStack({
      REVIEW_LLM_URL: undefined,
      WORKER_EMBEDDED: "pocketsphinx",
      ...(s3
        ? { OBJECT_STORE: "s3", S3_ENDPOINT: s3.endpoint, S3_BUCKET: s3.bucket, S3_ACCESS_KEY_ID: "S3RVER", S3_SECRET_ACCESS_KEY: "S3RVER" }
        : {}),
    });
  }, 120_000);

  afterAll(async () => {
    await stack?.stop();
    await s3?.stop();
  });

  it("completes with raw and reviewed results, every artifact, and the webhook, with no model configured", { timeout: 240_000 }, async () => {
    expect(stack.config.jobs.review).toBeUndefined();
    expect(stack.config.objects.backend).toBe(backend);
    const { key } = await stack.issueKey("pro", `owner-${randomHex()}`);
    const requestId = `embedded-review-${randomHex()}`;
    const res = await stack.fetch("/v1/audio/transcriptions/jobs", {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({
        audio_url: `${audioServer.url}/clip.wav`,
        request_id: requestId,
        segment_seconds: 30,
        review: true,
        metadata: METADATA,
        prompt: "A reading from Sense and Sensibility",
        webhook_url: `${hookServer.url}/h`,
      }),
    });
    expect(res.status).toBe(202);
    const { workflow_id } = (await res.json()) as { workflow_id: string };
    const view = await waitForJobEnd(stack.fetch, key, workflow_id, { timeoutMs: 220_000, what: "the embedded review job" });
    expect(view.error).toBeNull();
    expect(view.status).toBe("complete");
    const { result, reviewed_result } = view.output!;
    expect(result.metadata.chunk_count).toBe(1);
    expect(result.text).toContain("guess would");
    expect(reviewed_result).not.toBeNull();
    expect(reviewed_result!.review).toMatchObject({ reviewer: "embedded", model: "embedded", corrected_segments: 1 });
    expect(reviewed_result!.text).toContain("Dashwood");
    expect(reviewed_result!.text).not.toContain("guess would");
    for (const distractor of ["Elinor", "Marianne", "Willoughby", "Norland", "metformin"]) expect(reviewed_result!.text).not.toContain(distractor);
    // Structure and timings kept; only the corrected span differs.
    expect(reviewed_result!.segments.map((s) => [s.id, s.start_time, s.end_time])).toEqual(result.segments.map((s) => [s.id, s.start_time, s.end_time]));
    expect(reviewed_result!.text.replace(/John Dashwood|Dashwood/, "X")).toBe(result.text.replace(/john guess would|guess would/, "X"));
    const names = view.steps.map((s) => s.name);
    expect(names).toContain("review_chunk_0");
    expect(names).toContain("review");

    // Every artifact, stage 1's annotations with span, original, suggestion, reason and confidence.
    const owner = { workflowId: workflow_id, requestId };
    const store = await createObjectStore(stack.config.objects);
    const keys = await store.list(artifactKeys.prefix(owner));
    for (const k of [artifactKeys.audio(owner), artifactKeys.chunk(owner, 0), artifactKeys.result(owner), artifactKeys.reviewChunk(owner, 0), artifactKeys.reviewed(owner)]) {
      expect(keys).toContain(k);
    }
    const stage1 = reviewChunkArtifact.parse(await getJson(store, artifactKeys.reviewChunk(owner, 0)));
    await store.close();
    expect(stage1.model).toBe("embedded");
    const applied = stage1.annotations!.filter((a) => a.suggestion.includes("Dashwood"));
    expect(applied).toHaveLength(1);
    expect(applied[0]).toMatchObject({ segment_id: expect.any(Number), original: expect.stringContaining("guess would") });
    expect(applied[0]!.confidence).toBeGreaterThanOrEqual(0.8);
    // Applied because the slice's audio fits the term, not for the sound of the words alone.
    expect(applied[0]!.reason).toMatch(/the audio fits "(John )?Dashwood"/);
    expect(stage1.notes).toMatch(/[1-9]\d* checked against the audio/);
    expect(applied[0]!.end_word).toBeGreaterThan(applied[0]!.start_word);
    expect(stage1.corrections).toHaveLength(1);

    // The webhook carries the same output as the poll.
    const hook = await waitFor(async () => hooks.find((h) => h.includes(workflow_id)), { what: "webhook" });
    const payload = JSON.parse(hook) as WebhookPayload;
    expect(payload.output.result).toEqual(result);
    expect(payload.output.reviewed_result).toEqual(reviewed_result);
  });
});
