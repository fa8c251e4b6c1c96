import { describe, expect, it } from "vitest";
import { z } from "zod";
import { submitJobBody } from "./jobs";
import { findJsonProblem, INVALID_STRING, isUnstorableIssue, issueErrorCode, safeJsonObject, safeString, unstorableReason } from "./safe-string";

const limits = { maxBytes: 200, maxDepth: 3, maxKeyChars: 8 };
const firstIssue = (schema: z.ZodType, value: unknown) => schema.safeParse(value).error?.issues[0];

describe("unstorableReason", () => {
  it("refuses NUL and lone surrogates, high or low, anywhere in the string", () => {
    for (const s of ["\u0000", "a\u0000b", "\ud800", "x\ud800", "\udc00y", "\udfff\ud800", "😀\ud83d"]) expect(unstorableReason(s), JSON.stringify(s)).not.toBeNull();
  });
  it("accepts paired surrogates, other control characters and the empty string", () => {
    for (const s of ["", "plain", "😀", "a😀b", "\u0001\t\n", "\uffff", "é"]) expect(unstorableReason(s), JSON.stringify(s)).toBeNull();
  });
});

describe("safeString", () => {
  it("refuses an unstorable string with the invalid_string code and keeps chaining", () => {
    const schema = z.object({ prompt: safeString(10).trim().min(1) });
    const issue = firstIssue(schema, { prompt: "a\u0000" });
    expect(issue?.path).toEqual(["prompt"]);
    expect(isUnstorableIssue(issue)).toBe(true);
    expect(issueErrorCode(issue, "invalid_request")).toBe(INVALID_STRING);
    expect(schema.parse({ prompt: "  ok  " })).toEqual({ prompt: "ok" });
  });
  it("bounds the length with an ordinary (not invalid_string) issue", () => {
    const issue = firstIssue(safeString(3), "abcd");
    expect(issue?.message).toBe("must be at most 3 characters");
    expect(issueErrorCode(issue, "invalid_request")).toBe("invalid_request");
  });
});

describe("safeJsonObject", () => {
  const schema = z.object({ metadata: safeJsonObject(limits) });
  it("names the path of a bad nested value, through arrays", () => {
    const issue = firstIssue(schema, { metadata: { a: [1, { b: "\ud800" }] } });
    expect(issue?.path).toEqual(["metadata", "a", 1, "b"]);
    expect(issueErrorCode(issue, "x")).toBe(INVALID_STRING);
  });
  it("reports a bad key at its parent, without echoing it", () => {
    const issue = firstIssue(schema, { metadata: { ok: { "k\u0000": 1 } } });
    expect(issue?.path).toEqual(["metadata", "ok"]);
    expect(issue?.message).toMatch(/^has a key that contains the NUL character/);
    expect(isUnstorableIssue(firstIssue(schema, { metadata: { "\udc00": "v" } }))).toBe(true);
  });
  it("bounds depth, key length and size with invalid_request", () => {
    // metadata is level 1, so three levels hold and a fourth is refused
    expect(schema.safeParse({ metadata: { a: { b: { c: 1 } } } }).success).toBe(true);
    expect(issueErrorCode(firstIssue(schema, { metadata: { a: { b: { c: {} } } } }), "x")).toBe("invalid_request");
    expect(issueErrorCode(firstIssue(schema, { metadata: { ninechars: 1 } }), "x")).toBe("invalid_request");
    const big = firstIssue(schema, { metadata: { a: "x".repeat(200) } });
    expect(big?.path).toEqual(["metadata"]);
    expect(big?.message).toMatch(/more than 200$/);
  });
  it("accepts ordinary JSON: numbers, booleans, null, emoji", () => {
    expect(findJsonProblem({ n: 1.5, t: true, z: null, s: "😀", a: [] }, limits)).toBeNull();
  });
});

describe("submitJobBody", () => {
  const base = { audio_url: "https://example.com/a.wav" };
  it.each([
    ["prompt", { prompt: "\u0000" }, "prompt"],
    ["webhook_url", { webhook_url: "https://example.com/\ud800" }, "webhook_url"],
    ["audio_url", { audio_url: "https://example.com/\u0000" }, "audio_url"],
    ["request_id", { request_id: "r\ud800" }, "request_id"],
    ["metadata value", { metadata: { notes: "\u0000" } }, "metadata.notes"],
    ["metadata key", { metadata: { "\ud800": 1 } }, "metadata"],
  ])("refuses an unstorable %s", (_name, extra, param) => {
    const issue = firstIssue(submitJobBody, { ...base, ...extra });
    expect(isUnstorableIssue(issue)).toBe(true);
    expect(issue?.path.join(".")).toBe(param);
  });
});
