/**
 * `clip-parity plan`: scratch memory and collectives per rank of each subject for a real model at a
 * real scale, on the meta backend (harness/run/plan.ts).
 */
import { assertWorld, subjectsOf } from "../harness/run/policy.ts";
import { parseLayout } from "../harness/layout/layout.ts";
import { PLAN_TIMEOUT_MS, planCells, type PlanRank } from "../harness/run/plan.ts";
import { DTYPES } from "../harness/cell/cell.ts";
import { assertWritableFile, humanOutput, writeOutputFile } from "../harness/util/fs.ts";
import { list, parseChoice, parseCommand, parseInteger, str, type CommandSpec } from "./args.ts";

/** A plan holds no values, so it may go far wider than a run (progress is printed past 256 ranks). */
export const PLAN_MAX_WORLD = 16_384;

export const spec: CommandSpec = {
  name: "plan",
  summary: "Scratch memory and collectives per rank of each subject on the meta backend (shapes only, any scale).",
  flags: {
    model: { type: "string", value: "NAME", description: "clip-parity list models", required: true },
    layout: { type: "string", value: "SPEC", description: "e.g. tp8,dp_shard2", required: true },
    dtype: { type: "string", value: "f32|bf16|f16", description: "gradient dtype", default: "bf16" },
    subject: { type: "string", multiple: true, value: "NAME|PATH", description: "subjects to plan (default: the correct built-in ones)" },
    json: { type: "string", value: "FILE", description: "write the plan as JSON" },
    "timeout-s": { type: "string", value: "S", description: "wall-clock limit of one subject's meta run in seconds", default: String(PLAN_TIMEOUT_MS / 1000) },
    "max-world": { type: "string", value: "N", description: "refuse a layout of more ranks", default: String(PLAN_MAX_WORLD) },
  },
  notes: "exit status: 0 planned, 2 bad input",
};

const gb = (n: number) => `${(n / 1e9).toFixed(3)} GB`;

export async function run(argv: string[]): Promise<number> {
  const v = parseCommand(spec, argv);
  const dtype = parseChoice(str(v, "dtype")!, "--dtype", DTYPES);
  const layout = parseLayout(str(v, "layout")!);
  const maxWorld = parseInteger(str(v, "max-world")!, "--max-world", { min: 1 });
  assertWorld({ layout }, maxWorld, "--max-world");
  const timeoutMs = parseInteger(str(v, "timeout-s")!, "--timeout-s", { min: 1, max: 86_400 }) * 1000;
  const jsonPath = str(v, "json");
  if (jsonPath !== undefined) assertWritableFile(jsonPath, "--json");
  const started = performance.now();
  const plan = await planCells(str(v, "model")!, layout, dtype, subjectsOf({}, list(v, "subject")), (subject, i, total, world) => {
    // a plan of thousands of ranks takes a while: say what it is doing
    if (world >= 256) process.stderr.write(`plan: ${subject} (${i + 1}/${total}) on ${world.toLocaleString("en-US")} ranks...\n`);
  }, { timeoutMs });
  const out = humanOutput(jsonPath);
  out.write(`plan: ${plan.model} on ${plan.layout}, ${dtype} gradients (meta backend)\n`);
  out.write(`${"subject".padEnd(20)} ${"grads/rank (max)".padStart(18)} ${"scratch peak (max)".padStart(20)} ${"collectives (max)".padStart(18)} ${"comm bytes (max)".padStart(18)}\n`);
  for (const s of plan.subjects) {
    const max = (f: (r: PlanRank) => number) => Math.max(...s.ranks.map(f));
    out.write(
      `${s.subject.padEnd(20)} ${gb(max((r) => r.gradBytes)).padStart(18)} ${gb(max((r) => r.scratchPeakBytes)).padStart(20)} ` +
        `${String(max((r) => r.collectives)).padStart(18)} ${String(max((r) => r.commBytes)).padStart(18)}` +
        `${s.liveness ? `  liveness: ${s.liveness}` : ""}\n`,
    );
  }
  const first = plan.subjects[0];
  if (first) {
    out.write(`stage profile of rank ${first.stages.rank} (${first.subject}):\n`);
    for (const st of first.stages.stages) out.write(`  ${st.stage.padEnd(14)} live ${gb(st.liveBytes)}  peak ${gb(st.peakBytes)}\n`);
  }
  out.write(`planned in ${((performance.now() - started) / 1000).toFixed(2)} s\n`);
  if (jsonPath) writeOutputFile(jsonPath, JSON.stringify(plan, null, 2) + "\n");
  return 0;
}
