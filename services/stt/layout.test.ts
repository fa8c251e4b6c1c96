import { describe, expect, it } from "vitest";
import { ConfigError } from "../../shared/config";
import { layoutChildren, layoutFor, selectServices } from "./layout";

/** The services of services.ts in start order (the last test checks this list against it). */
const ALL = [
  "projector",
  "transcriber",
  "http-gateway",
  "vad",
  "rt-transcriber",
  "jobs-manager",
  "jobs-fetcher",
  "jobs-slicer",
  "jobs-transcriber",
  "jobs-aggregator",
  "jobs-reviewer",
  "webhooks",
  "realtime-gateway",
];
const EDGE_GROUP = ["projector", "http-gateway", "jobs-manager", "jobs-fetcher", "jobs-slicer", "jobs-transcriber", "jobs-aggregator", "jobs-reviewer", "webhooks", "realtime-gateway"];

const given = (cores: number, services: string[] = ALL) => ({
  when: (setting: string) => ({
    then: (groups: string[][]) => expect(layoutFor(cores, setting, services)).toEqual(groups),
    thenRefuses: (message: RegExp) => {
      const run = () => layoutFor(cores, setting, services);
      expect(run).toThrow(ConfigError);
      expect(run).toThrow(message);
    },
  }),
});

describe("layoutFor: auto", () => {
  it("one core: one process with everything", () => given(1).when("auto").then([ALL]));
  it("two cores: the edge with the projector, job steps and webhooks; the VAD with the engines", () =>
    given(2).when("auto").then([EDGE_GROUP, ["transcriber", "vad", "rt-transcriber"]]));
  it("three cores: as two", () => given(3).when("auto").then([EDGE_GROUP, ["transcriber", "vad", "rt-transcriber"]]));
  it("four cores and more: the VAD in a process of its own", () => {
    given(4).when("auto").then([EDGE_GROUP, ["vad"], ["transcriber", "rt-transcriber"]]);
    given(64).when("auto").then([EDGE_GROUP, ["vad"], ["transcriber", "rt-transcriber"]]);
  });
  it("a core count below one (unknown) counts as one", () => given(0).when("auto").then([ALL]));
  it("a service the table does not name goes with the edge", () =>
    given(2, [...ALL, "new-thing"]).when("auto").then([[...EDGE_GROUP, "new-thing"], ["transcriber", "vad", "rt-transcriber"]]));
  it("places only the services selected, dropping groups left empty", () => {
    given(2, ["http-gateway", "realtime-gateway"]).when("auto").then([["http-gateway", "realtime-gateway"]]);
    given(2, ["vad", "rt-transcriber"]).when("auto").then([["vad", "rt-transcriber"]]);
    given(4, ["projector", "vad", "transcriber"]).when("auto").then([["projector"], ["vad"], ["transcriber"]]);
  });
  it("surrounding blanks are ignored", () => given(2).when("  auto ").then([EDGE_GROUP, ["transcriber", "vad", "rt-transcriber"]]));
});

describe("layoutFor: single", () => {
  it("one process whatever the cores", () => given(64).when("single").then([ALL]));
  it("of the services selected", () => given(8, ["vad", "rt-transcriber"]).when("single").then([["vad", "rt-transcriber"]]));
});

describe("layoutFor: explicit groups", () => {
  const twoGroups = `${EDGE_GROUP.join(",")}/vad,rt-transcriber,transcriber`;
  it("takes the groups as written, each in start order, the edge's first", () => {
    given(1).when(twoGroups).then([EDGE_GROUP, ["transcriber", "vad", "rt-transcriber"]]);
    given(1).when(`vad,rt-transcriber,transcriber/${EDGE_GROUP.join(",")}`).then([EDGE_GROUP, ["transcriber", "vad", "rt-transcriber"]]);
  });
  it("blanks around names and groups are allowed", () =>
    given(2).when(` ${EDGE_GROUP.join(" , ")} / vad , rt-transcriber / transcriber `).then([EDGE_GROUP, ["vad", "rt-transcriber"], ["transcriber"]]));
  it("refuses an unknown name, listing the services to place", () =>
    given(2).when(`${twoGroups},vda`).thenRefuses(/unknown service vda; the services to place \(STT_SERVICES\): projector, transcriber/));
  it("refuses a service named twice", () => given(2).when(`${twoGroups}/vad`).thenRefuses(/named more than once: vad/));
  it("refuses a service left out", () => given(2).when(EDGE_GROUP.join(",")).thenRefuses(/missing: transcriber, vad, rt-transcriber/));
  it("refuses an empty group or name", () => {
    given(2).when(`${twoGroups}/`).thenRefuses(/an empty group or name/);
    given(2).when(twoGroups.replace("vad,", "vad,,")).thenRefuses(/an empty group or name/);
  });
  it("refuses the two gateways apart: they share the one PORT", () =>
    given(2).when(`${EDGE_GROUP.filter((s) => s !== "realtime-gateway").join(",")}/vad,rt-transcriber,transcriber/realtime-gateway`).thenRefuses(/share the one PORT/));
  it("with STT_SERVICES a subset, names exactly that subset", () => {
    given(2, ["vad", "rt-transcriber"]).when("vad/rt-transcriber").then([["vad"], ["rt-transcriber"]]);
    given(2, ["vad", "rt-transcriber"]).when("vad/rt-transcriber,projector").thenRefuses(/unknown service projector/);
  });
});

describe("selectServices", () => {
  it("all is every service, in start order", () => expect(selectServices(["all"], ALL)).toEqual(ALL));
  it("a list is put in start order", () => expect(selectServices(["realtime-gateway", "projector"], ALL)).toEqual(["projector", "realtime-gateway"]));
  it("refuses an unknown name and an empty list", () => {
    expect(() => selectServices(["vad", "vda"], ALL)).toThrow(/unknown service\(s\) vda; known: projector/);
    expect(() => selectServices([], ALL)).toThrow(ConfigError);
  });
});

describe("layoutChildren", () => {
  const shared = { NATS_URL: "nats://n:4222", DATABASE_URL: "postgres://p/db", GATEWAY_ADMIN_TOKEN: "t" };
  it("gives every child the shared settings and its services; only the HTTP gateway's child serves /metrics on PORT", () => {
    expect(layoutChildren([EDGE_GROUP, ["vad"], ["transcriber", "rt-transcriber"]], shared, 9464)).toEqual([
      { name: EDGE_GROUP.join(","), env: { ...shared, STT_SERVICES: EDGE_GROUP.join(",") } },
      { name: "vad", env: { ...shared, STT_SERVICES: "vad", METRICS_PORT: "9464" } },
      { name: "transcriber,rt-transcriber", env: { ...shared, STT_SERVICES: "transcriber,rt-transcriber", METRICS_PORT: "9465" } },
    ]);
  });
  it("METRICS_PORT=0: each picks a free port", () => {
    const children = layoutChildren([["vad"], ["transcriber"]], shared, 0);
    expect(children.map((c) => c.env.METRICS_PORT)).toEqual(["0", "0"]);
  });
  it("a realtime gateway without the HTTP gateway serves /metrics on a metrics port too", () => {
    expect(layoutChildren([["realtime-gateway"]], {}, 9000)[0]!.env.METRICS_PORT).toBe("9000");
  });
});

describe("the service names", () => {
  it("are those of services.ts, in its order", async () => {
    const { serviceDefs } = await import("./services");
    expect(serviceDefs.map((d) => d.name)).toEqual(ALL);
  });
});
