import { execFileSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { REPO_ROOT } from "./support/fixtures";

/**
 * The docs hold together: a user page (docs/*.md; contributors' pages live in docs/design/
 * and docs/benchmarks/) stays short enough to read, every relative Markdown link reaches a
 * file and, with `#anchor`, a heading of it, and every citation of a page's section in the
 * repository (`docs/<page>.md, "Section"` in a comment or a page) names a
 * page that exists and a heading that page has. Moving a section without its citations
 * fails here. And docs/benchmarks.md with its charts is what `./scripts/bench.sh plots`
 * draws from the committed results files, not a page edited by hand.
 */
const MAX_USER_PAGE_LINES = 600;

const tracked = execFileSync("git", ["ls-files", "--cached", "--others", "--exclude-standard"], { cwd: REPO_ROOT, encoding: "utf8" })
  .split("\n")
  .filter((f) => f && existsSync(join(REPO_ROOT, f)));
const pages = tracked.filter((f) => /^docs\/.*\.md$/.test(f) || f === "README.md");
const userPages = readdirSync(join(REPO_ROOT, "docs")).filter((f) => f.endsWith(".md")).map((f) => `docs/${f}`);
const read = (file: string) => readFileSync(join(REPO_ROOT, file), "utf8");

/** A page's headings, outside code blocks. */
function headings(file: string): string[] {
  let fenced = false;
  const out: string[] = [];
  for (const line of read(file).split("\n")) {
    if (line.startsWith("```")) fenced = !fenced;
    const m = !fenced && /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (m) out.push(m[1]!);
  }
  return out;
}

/** GitHub's anchors for a page's headings: lower case, punctuation dropped, spaces to hyphens, repeats numbered. */
function anchors(file: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const h of headings(file)) {
    const base = h
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, "")
      .replace(/\s/g, "-");
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

const plain = (s: string) => s.replace(/[`*_]/g, "").replace(/\s+/g, " ").trim().toLowerCase();

describe("the docs", () => {
  it(`keeps every user page under docs/ within ${MAX_USER_PAGE_LINES} lines`, () => {
    expect(userPages.length).toBeGreaterThan(5);
    const long = userPages.map((p) => ({ page: p, lines: read(p).split("\n").length - 1 })).filter((p) => p.lines > MAX_USER_PAGE_LINES);
    expect(long, "split the page: a guide and a reference for users, the reasoning to docs/design/, figures to docs/benchmarks/").toEqual([]);
  });

  it("has no relative Markdown link to a missing file or anchor", () => {
    const broken: string[] = [];
    let checked = 0;
    for (const page of pages) {
      let fenced = false;
      read(page)
        .split("\n")
        .forEach((line, i) => {
          if (line.startsWith("```")) fenced = !fenced;
          if (fenced) return;
          for (const m of line.replace(/`[^`]*`/g, "").matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
            const target = m[1]!;
            if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // http:, mailto:
            checked++;
            const [path, anchor] = target.split("#") as [string, string | undefined];
            const file = path ? relative(REPO_ROOT, resolve(REPO_ROOT, dirname(page), decodeURIComponent(path))) : page;
            if (!existsSync(join(REPO_ROOT, file))) broken.push(`${page}:${i + 1}: ${target} (no ${file})`);
            else if (anchor && file.endsWith(".md") && !anchors(file).has(anchor)) broken.push(`${page}:${i + 1}: ${target} (no heading #${anchor} in ${file})`);
          }
        });
    }
    expect(checked).toBeGreaterThan(20);
    expect(broken).toEqual([]);
  });

  it('has no citation of a page or section that is not there (docs/<page>.md, "Section")', () => {
    const broken: string[] = [];
    let sections = 0;
    for (const file of tracked.filter((f) => /\.(md|ts|mjs|cjs|js|sh|c)$/.test(f))) {
      const text = read(file);
      // a citation may wrap onto the next comment line: `docs/<page>.md,\n * "Section"`
      const citation = /(?<![\w/.])(docs\/[\w/-]+\.md)(?:,?(?: |[ \t]*\n[ \t]*(?:\*|\/\/|#)?[ \t]*)"([^"\n]{2,80})")?/g;
      for (const m of text.matchAll(citation)) {
        const [, page, section] = m;
        const line = text.slice(0, m.index).split("\n").length;
        if (!existsSync(join(REPO_ROOT, page!))) {
          broken.push(`${file}:${line}: ${page} does not exist`);
          continue;
        }
        if (!section) continue;
        sections++;
        if (!headings(page!).some((h) => plain(h).startsWith(plain(section)))) broken.push(`${file}:${line}: ${page} has no heading "${section}"`);
      }
    }
    expect(sections).toBeGreaterThan(20);
    expect(broken).toEqual([]);
  });

  it("has docs/benchmarks.md and its charts as bench/plot.ts draws them from the committed bench/results/", () => {
    const dir = mkdtempSync(join(tmpdir(), "plots-"));
    try {
      // the committed results only: a bench run since writes files the page may not show yet
      const committed = execFileSync("git", ["ls-files", "bench/results"], { cwd: REPO_ROOT, encoding: "utf8" }).split("\n").filter((f) => f.endsWith(".json"));
      mkdirSync(join(dir, "results"));
      for (const f of committed) copyFileSync(join(REPO_ROOT, f), join(dir, "results", f.split("/").pop()!));
      execFileSync(join(REPO_ROOT, "node_modules/.bin/tsx"), ["bench/plot.ts", "--results", join(dir, "results"), "--docs", dir], { cwd: REPO_ROOT, stdio: "pipe" });
      const drawn = readdirSync(join(dir, "benchmarks")).filter((f) => f.endsWith(".svg"));
      expect(drawn.length).toBeGreaterThanOrEqual(5);
      const stale = ["benchmarks.md", ...drawn.map((f) => `benchmarks/${f}`)].filter((f) => readFileSync(join(dir, f), "utf8") !== read(`docs/${f}`));
      expect(stale, "run ./scripts/bench.sh plots and commit what it writes").toEqual([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
