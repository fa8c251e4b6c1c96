import { describe, expect, it } from "vitest";
import { legacyWorkflowIdFor, workflowIdFor } from "./job-ids";
import { artifactKeys, artifactPrefix } from "./jobs";

const uuidV8 = /^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describe("job ids", () => {
  it("are stable per (owner, request_id) and differ between owners", () => {
    const a = workflowIdFor("tenant-a", "req-1");
    expect(a).toMatch(uuidV8);
    expect(workflowIdFor("tenant-a", "req-1")).toBe(a);
    expect(workflowIdFor("tenant-b", "req-1")).not.toBe(a);
    expect(workflowIdFor("tenant-a", "req-2")).not.toBe(a);
  });

  it("keep owner and request_id apart (no concatenation collisions)", () => {
    expect(workflowIdFor("a:b", "c")).not.toBe(workflowIdFor("a", "b:c"));
  });

  it("never coincide with the legacy request_id-only id", () => {
    expect(legacyWorkflowIdFor("req-1")).toMatch(uuidV8);
    expect(workflowIdFor("tenant-a", "req-1")).not.toBe(legacyWorkflowIdFor("req-1"));
  });

  it("the legacy id is the one jobs got before scoping (unchanged derivation)", () => {
    // Computed with the previous workflowIdFor(requestId); jobs in the log carry it.
    expect(legacyWorkflowIdFor("req-1")).toBe("0774caea-05dd-8de7-b80b-e1bbd8bbdbb7");
  });
});

describe("artifact keys", () => {
  it("give each owner's job its own folder under transcription/{request_id}/", () => {
    const a = { workflowId: workflowIdFor("tenant-a", "req-1"), requestId: "req-1" };
    const b = { workflowId: workflowIdFor("tenant-b", "req-1"), requestId: "req-1" };
    expect(artifactPrefix(a)).toBe(`transcription/req-1/${a.workflowId}/`);
    expect(artifactKeys.chunk(a, 3)).toBe(`transcription/req-1/${a.workflowId}/chunk_3.json`);
    expect(artifactKeys.result(a)).not.toBe(artifactKeys.result(b));
    expect(artifactKeys.audio(a)).not.toBe(artifactKeys.audio(b));
  });

  it("keep legacy jobs in the flat folder they were written to", () => {
    const old = { workflowId: legacyWorkflowIdFor("req-1"), requestId: "req-1" };
    expect(artifactKeys.result(old)).toBe("transcription/req-1/result.json");
    expect(artifactKeys.reviewChunk(old, 0)).toBe("transcription/req-1/review_chunk_0.json");
  });
});
