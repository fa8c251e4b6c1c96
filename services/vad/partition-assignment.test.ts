import { describe, expect, it } from "vitest";
import { emptyTable, fairShare, planAssignment, releasePartitions, type AssignmentTable } from "./partition-assignment";

const TTL = 6000;

/** Runs ticks of the given members in order until nothing changes; returns who runs what. */
function settle(members: string[], partitions: number, now: number, table: AssignmentTable = emptyTable(), running = new Map<string, Set<number>>()) {
  for (let round = 0; round < 10; round++) {
    let changed = false;
    for (const m of members) {
      const mine = running.get(m) ?? new Set<number>();
      const plan = planAssignment(table, m, partitions, mine, now, TTL);
      table = plan.next;
      for (const p of [...plan.lost, ...plan.surplus]) mine.delete(p);
      for (const p of plan.start) mine.add(p);
      if (plan.surplus.length) table = releasePartitions(table, m, plan.surplus) ?? table;
      running.set(m, mine);
      changed ||= plan.start.length + plan.lost.length + plan.surplus.length > 0;
    }
    if (!changed) break;
  }
  return { table, running };
}

const sorted = (s?: Set<number>) => [...(s ?? [])].sort((a, b) => a - b);

describe("vad partition assignment", () => {
  it("fair shares add up to the partitions; the first ids take the remainder", () => {
    expect(["b", "a", "c"].map((m) => fairShare(["b", "a", "c"], m, 4))).toEqual([1, 2, 1]);
    expect(fairShare(["a"], "a", 4)).toBe(4);
    expect(fairShare(["a", "b", "c", "d", "e"], "e", 4)).toBe(0);
  });

  it("given an empty table, one member takes every partition", () => {
    const plan = planAssignment(emptyTable(), "a", 4, new Set(), 0, TTL);
    expect(plan.start).toEqual([0, 1, 2, 3]);
    expect(Object.values(plan.next.owners).map((o) => o.member)).toEqual(["a", "a", "a", "a"]);
    expect(plan.next.members.a.exp).toBe(TTL);
  });

  it("a second member joining gets half: the first stops its surplus before releasing it", () => {
    let { table, running } = settle(["a"], 4, 0);
    const joined = planAssignment(table, "b", 4, new Set(), 1000, TTL);
    expect(joined.start).toEqual([]); // nothing is free yet
    table = joined.next;
    const a = planAssignment(table, "a", 4, running.get("a")!, 1000, TTL);
    expect(a.surplus).toEqual([2, 3]);
    expect(a.next.owners[2].member).toBe("a"); // held until stopped
    ({ running } = settle(["a", "b"], 4, 1000, table, running));
    expect(sorted(running.get("a"))).toEqual([0, 1]);
    expect(sorted(running.get("b"))).toEqual([2, 3]);
  });

  it("a member that stops renewing loses its partitions after the TTL, and no partition ever has two runners", () => {
    let { table, running } = settle(["a", "b", "c"], 4, 0);
    const all = () => [...running.values()].flatMap((s) => [...s]);
    expect(all().sort()).toEqual([0, 1, 2, 3]);
    // c dies at t=0; before the TTL nothing moves
    running.delete("c");
    ({ table, running } = settle(["a", "b"], 4, TTL - 1, table, running));
    expect(all().length).toBeLessThan(4);
    ({ table, running } = settle(["a", "b"], 4, TTL + 1, table, running));
    expect(all().sort()).toEqual([0, 1, 2, 3]);
    expect(new Set(all()).size).toBe(4);
    expect(Object.keys(table.members).sort()).toEqual(["a", "b"]);
  });

  it("a member whose lease lapsed and was taken over stops that partition", () => {
    const table: AssignmentTable = { members: { b: { exp: 10_000 } }, owners: { "0": { member: "b", exp: 10_000 } } };
    const plan = planAssignment(table, "a", 1, new Set([0]), 9000, TTL);
    expect(plan.lost).toEqual([0]);
    expect(plan.next.owners[0].member).toBe("b");
  });

  it("leaving releases the member's partitions and membership only", () => {
    const { table } = settle(["a", "b"], 4, 0);
    const left = releasePartitions(table, "a", [0, 1], true)!;
    expect(Object.keys(left.members)).toEqual(["b"]);
    expect(Object.values(left.owners).map((o) => o.member)).toEqual(["b", "b"]);
  });
});
