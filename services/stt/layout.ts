import { ConfigError } from "../../shared/config";

/**
 * How `stt supervise` spreads the services over `stt serve` processes (STT_LAYOUT,
 * docs/operations.md "Process layout"). One Node process runs its JavaScript on one
 * core: the realtime plane's VAD, the transcribing engines and the edge each want one.
 *
 * The table `auto` uses, by the number of cores. Each entry lists the groups other than
 * the first; the first group is every service not named here (the edge, the projector,
 * the job steps, webhooks, and any service added later), so a new service lands beside
 * the edge until someone decides otherwise. Change a row here when measurements say so.
 */
const AUTO: Array<{ minCores: number; apart: string[][] }> = [
  // the VAD's per-partition loops and the engines' decoding apart from the edge
  { minCores: 4, apart: [["vad"], ["rt-transcriber", "transcriber"]] },
  { minCores: 2, apart: [["vad", "rt-transcriber", "transcriber"]] },
  // one core: one process, no serialising between processes on the one core
  { minCores: 1, apart: [] },
];

/** The services that take PORT: they must run in one process (one base URL). */
const EDGE = ["http-gateway", "realtime-gateway"];

/**
 * The process groups for `setting` (STT_LAYOUT: `single`, `auto`, or explicit groups
 * `a,b/c,d`) on a machine with `cores` cores, for `services` (the services to run, in
 * start order: STT_SERVICES resolved). Every group is a non-empty list in start order,
 * each service is in exactly one group, and the group holding the edge comes first.
 * An explicit layout must name each of `services` exactly once.
 */
export function layoutFor(cores: number, setting: string, services: readonly string[]): string[][] {
  const value = setting.trim();
  if (value === "single") return nonEmpty([[...services]]);
  const groups = value === "auto" ? autoGroups(cores, services) : explicitGroups(value, services);
  const isEdge = (g: string[]) => g.some((s) => EDGE.includes(s));
  if (groups.filter(isEdge).length > 1) throw new ConfigError([`STT_LAYOUT: ${EDGE.join(" and ")} share the one PORT: put them in the same group`]);
  const edgeFirst = [...groups.filter(isEdge), ...groups.filter((g) => !isEdge(g))];
  return nonEmpty(edgeFirst.map((g) => services.filter((s) => g.includes(s))));
}

function autoGroups(cores: number, services: readonly string[]): string[][] {
  const row = AUTO.find((r) => cores >= r.minCores) ?? AUTO[AUTO.length - 1]!;
  const apart = row.apart.map((g) => g.filter((s) => services.includes(s)));
  const placed = new Set(apart.flat());
  return [services.filter((s) => !placed.has(s)), ...apart];
}

function explicitGroups(value: string, services: readonly string[]): string[][] {
  const groups = value.split("/").map((g) => g.split(",").map((s) => s.trim()));
  const issues: string[] = [];
  if (groups.some((g) => g.some((s) => s === ""))) issues.push(`STT_LAYOUT: an empty group or name in "${value}" (groups are separated by "/", names by ",")`);
  const named = groups.flat().filter(Boolean);
  const unknown = [...new Set(named.filter((s) => !services.includes(s)))];
  if (unknown.length) issues.push(`STT_LAYOUT: unknown service${unknown.length > 1 ? "s" : ""} ${unknown.join(", ")}; the services to place (STT_SERVICES): ${services.join(", ")}`);
  const twice = [...new Set(named.filter((s, i) => named.indexOf(s) !== i))];
  if (twice.length) issues.push(`STT_LAYOUT: each service goes in exactly one group; named more than once: ${twice.join(", ")}`);
  const missing = services.filter((s) => !named.includes(s));
  if (missing.length) issues.push(`STT_LAYOUT: each service goes in exactly one group; missing: ${missing.join(", ")} (or use "auto" or "single")`);
  if (issues.length) throw new ConfigError(issues);
  return groups;
}

const nonEmpty = (groups: string[][]) => groups.filter((g) => g.length > 0);

/**
 * The services STT_SERVICES selects, in start order (`known`): `all` is every one. An
 * unknown name is a ConfigError naming the known ones.
 */
export function selectServices(list: readonly string[], known: readonly string[]): string[] {
  if (list.length === 0) throw new ConfigError(["STT_SERVICES: names no service (a comma list, or all)"]);
  if (list.includes("all")) return [...known];
  const unknown = list.filter((n) => !known.includes(n));
  if (unknown.length) throw new ConfigError([`STT_SERVICES: unknown service(s) ${unknown.join(", ")}; known: ${known.join(", ")}`]);
  return known.filter((n) => list.includes(n));
}

/** One `stt serve` of a layout: its name (its services, comma-separated) and what its environment adds. */
export interface LayoutChild {
  name: string;
  env: Record<string, string>;
}

/**
 * The environment of each group's `stt serve`: STT_SERVICES, and `shared` (the NATS and
 * Postgres addresses and the secrets the supervisor resolved once). Only the group with
 * `http-gateway` serves /metrics on PORT; every other one serves it on a port of its own,
 * METRICS_PORT, METRICS_PORT+1, … in group order (0 stays 0: each picks a free one), so
 * no two of them fight over one.
 */
export function layoutChildren(groups: string[][], shared: Record<string, string>, metricsPort: number): LayoutChild[] {
  let next = metricsPort;
  return groups.map((group) => {
    const env: Record<string, string> = { ...shared, STT_SERVICES: group.join(",") };
    if (!group.includes("http-gateway")) {
      env.METRICS_PORT = String(next);
      if (metricsPort !== 0) next++;
    }
    return { name: group.join(","), env };
  });
}
