import { describe, expect, it } from "vitest";
import { decideBridge } from "./http-bridge";

const parts = (method: string, path: string, host?: string, query = "") => ({
  method,
  path,
  query,
  headers: host === undefined ? [] : ([["host", host]] as [string, string][]),
});

describe("decideBridge: what reaches the fetch API", () => {
  it("refuses methods the fetch API cannot construct with 405, unknown ones with 501", () => {
    for (const m of ["trace", "TRACE", "CONNECT", "TRACK"]) expect(decideBridge(parts(m, "/health", "x"))).toMatchObject({ kind: "refuse", status: 405, code: "method_not_allowed" });
    expect(decideBridge(parts("PROPFIND", "/health", "x"))).toMatchObject({ kind: "refuse", status: 501, code: "method_not_implemented" });
  });

  it("refuses Host headers that are not a valid authority with 400", () => {
    for (const h of ["a b", "[::1", "%zz", "x:99999", "user@host", "x/v1/external-transcription/plans#", "é.example", "x?y"]) {
      expect(decideBridge(parts("GET", "/health", h)), h).toMatchObject({ kind: "refuse", status: 400, code: "invalid_host" });
    }
    const two = { method: "GET", path: "/health", query: "", headers: [["host", "a"], ["host", "b"]] as [string, string][] };
    expect(decideBridge(two)).toMatchObject({ kind: "refuse", code: "invalid_host" });
  });

  it("accepts ordinary hosts, and none at all", () => {
    for (const h of ["localhost", "127.0.0.1:8080", "[::1]:80", "api.example.com", "a-b.example.", undefined]) {
      expect(decideBridge(parts("GET", "/health", h)), String(h)).toMatchObject({ kind: "fetch", method: "GET" });
    }
  });

  it("routes by the request line only: # and \\ stay path characters, // stays a path", () => {
    const at = (path: string) => {
      const d = decideBridge(parts("GET", path, "x"));
      if (d.kind !== "fetch") throw new Error(`refused ${path}`);
      return new URL(d.url);
    };
    expect(at("/health#x").pathname).toBe("/health%23x");
    expect(at("/v1\\health").pathname).toBe("/v1%5Chealth");
    expect(at("//evil.com/health")).toMatchObject({ host: "x", pathname: "//evil.com/health" });
    expect(decideBridge(parts("GET", "http://evil/health", "x"))).toMatchObject({ kind: "refuse", code: "invalid_request_target" });
  });

  it("keeps the query", () => {
    const d = decideBridge(parts("GET", "/a", "x", "b=1&c=%zz"));
    expect(d.kind === "fetch" && new URL(d.url).search).toBe("?b=1&c=%zz");
  });
});
