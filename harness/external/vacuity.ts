/**
 * Vacuous passes (issue 23): a framework's pass on a cell proves nothing when a subject that does not do
 * the work would pass it too. Two native probes stand for "doing nothing" here, and a framework's pass on a
 * cell that either probe passes is reported as vacuous, not counted as a pass (docs/frameworks.md):
 * - `nothing`: returns a norm of 0 and scales nothing (passes where every gradient is zero);
 * - `local-only`: takes the norm of the copies it holds, with no collective at all, and clips by it (passes
 *   where every rank's local norm is the global one: one rank, replicas only, or an inf-norm whose global
 *   max every rank holds).
 * They are not subjects a user runs: they exist to judge what a cell can show.
 */
import { defineSubject, type Subject } from "../subject/api.ts";
import { combine, counts, finishClip, localPartial } from "../subject/common.ts";
import { runCell } from "../execute/cell.ts";
import type { Case } from "../cell/cell.ts";

const nothing = defineSubject({
  name: "vacuity:nothing",
  description: "returns 0 and scales nothing",
  tolerance: "fp32",
  async clip() {
    return 0;
  },
});

const localOnly = defineSubject({
  name: "vacuity:local-only",
  description: "the norm of the copies this rank holds, no collective, and the clip by it",
  tolerance: "fp32",
  async clip(rank, args) {
    let total = 0;
    for (const p of args.logical) if (counts(p)) total = combine(total, localPartial(rank.ops, p.grad, args.normType), args.normType);
    return finishClip(rank, args, total);
  },
});

const PROBES: readonly [Subject, string][] = [
  [nothing, "a clip that returns 0 and scales nothing passes it too (every gradient is zero)"],
  [localOnly, "a clip that issues no collective (each rank's own norm) passes it too: every rank's local norm is the global one"],
];

/**
 * Null when the cell can tell a clip that does the work from one that does not; otherwise why not: the
 * first probe that passes every check of it.
 */
export async function vacuity(c: Case): Promise<string | null> {
  for (const [probe, why] of PROBES) {
    const r = await runCell({ subject: probe.name, ...c }, { subject: probe });
    // comm.reach fails a probe for issuing no collective; a probe with one dummy all_reduce would not be,
    // so it says nothing of whether the cell's values can tell work from no work
    if (r.checks.every((k) => k.status !== "fail" || k.id === "comm.reach")) return why;
  }
  return null;
}
