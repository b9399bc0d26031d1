/**
 * The cases of docs/frameworks.md (harness/external/frameworks-run.ts renders it): the gpu4 matrix and
 * the cpu matrix's distinct shapes. Here, beside the matrices, so that harness/ imports no matrix.
 */
import { formatLayout, parseLayout } from "../harness/layout/layout.ts";
import { builtinMatrices, CPU_LAYOUTS, GPU_LAYOUTS, type Case } from "./index.ts";

/** The cpu matrix's cases whose shape (layout) gpu4 lacks: both debug models, f32, norm 2, active. */
export function distinctShapeCases(): Case[] {
  const gpu4 = new Set(GPU_LAYOUTS.gpu4.map((l) => formatLayout(parseLayout(l))));
  const cpu = builtinMatrices().cpu.cases;
  const out: Case[] = [];
  for (const spec of CPU_LAYOUTS) {
    const layout = formatLayout(parseLayout(spec));
    if (gpu4.has(layout)) continue;
    for (const model of ["llama3-debug", "deepseek-v3-debug"]) {
      const c = cpu.find((x) => formatLayout(x.layout) === layout && x.model === model && x.dtype === "f32" && x.normType === 2 && x.regime === "active");
      if (!c) throw new Error(`internal: the cpu matrix has no f32/n2/active case for ${layout} ${model}`);
      out.push(c);
    }
  }
  return out;
}

/** Every case of the page: gpu4, then the distinct shapes. */
export function frameworkCases(): Case[] {
  return [...builtinMatrices().gpu4.cases, ...distinctShapeCases()];
}
