/**
 * Framework support as one unit per framework (issue 43): adapters/torch/support/ holds one Python module per
 * framework, registered by name; the argument sources the adapter builds itself (adapter.py CORE_SOURCES) and those
 * the modules provide are exactly protocol.ts ARG_SOURCES, and an exported script carries the framework's module
 * verbatim. And the inputs are what the frameworks' users build: plain tensors on one rank, FSDP1 wrapped per
 * transformer block, torchtitan's meshes with dp_shard and cp folded into one fsdp dimension.
 */
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { ARG_SOURCES } from "../../harness/external/torch/protocol.ts";
import { buildExport, SUPPORT_DIR, supportRegistry, supportText } from "../../harness/external/torch/export.ts";
import { FRAMEWORKS_DIR } from "../../harness/external/torch/frameworks.ts";
import { ADAPTER_DIR, torchOptionsFromEnv } from "../../harness/external/torch/options.ts";
import { closeTorchSessions, loadTorchSubject, type TorchSubject } from "../../harness/external/torch/subject.ts";
import { loadSubject } from "../../harness/registry/registry.ts";
import { parseLayout } from "../../harness/layout/layout.ts";
import { runCell } from "../../harness/execute/cell.ts";
import type { Cell } from "../../harness/cell/cell.ts";
import type { CellResult } from "../../harness/results/types.ts";
import { torchAvailability } from "./torch-available.ts";

const torch = torchAvailability();

afterAll(async () => {
  await closeTorchSessions();
});

/** What the adapter's Python side says of its sources and registry (imports adapter.py as a module). */
function pythonSide(): { core: string[]; provided: Record<string, string>; registry: Record<string, string>; meshes: Record<string, Record<string, [string, string[]][]>> } {
  const code = [
    "import json, sys",
    `sys.path.insert(0, ${JSON.stringify(ADAPTER_DIR)})`,
    "import adapter, support",
    "meshes = {}",
    "for name in support.REGISTRY:",
    "    m = support.module(name)",
    "    if hasattr(m, 'MESHES'): meshes[name] = {k: [[d, list(h)] for d, h in v] for k, v in m.MESHES.items()}",
    "print(json.dumps({'core': list(adapter.CORE_SOURCES), 'provided': {k: v[0] for k, v in support.all_sources().items()}, 'registry': support.REGISTRY, 'meshes': meshes}))",
  ].join("\n");
  return JSON.parse(execFileSync(torchOptionsFromEnv().python, ["-c", code], { encoding: "utf8" }));
}

const cell = (subject: string, layout: string, model: string, regime: Cell["regime"] = "active"): Cell => ({ subject, layout: parseLayout(layout), model, dtype: "f32", normType: 2, regime, seed: 0 });
const failed = (r: CellResult) => r.checks.filter((c) => c.status === "fail").map((c) => `${c.id}: ${c.message.split("\n")[0]}`);

describe.runIf(torch.run)(`framework support modules${torch.skipNote}`, () => {
  it("the adapter's own sources and the modules' are ARG_SOURCES, each provided once", () => {
    const py = pythonSide();
    const provided = Object.keys(py.provided);
    expect(py.core.filter((s) => provided.includes(s)), "provided by adapter.py and a module").toEqual([]);
    expect([...py.core, ...provided].sort()).toEqual(Object.keys(ARG_SOURCES).sort());
  });

  it("the registry names frameworks that exist, and export.ts reads it as Python does", () => {
    const py = pythonSide();
    expect(Object.fromEntries(supportRegistry())).toEqual(py.registry);
    for (const [name, module] of Object.entries(py.registry)) {
      expect(existsSync(join(FRAMEWORKS_DIR, `${name}.json`)), `support REGISTRY "${name}": adapters/torch/frameworks/${name}.json`).toBe(true);
      expect(existsSync(join(SUPPORT_DIR, `${module}.py`)), `support REGISTRY "${name}": ${module}.py`).toBe(true);
    }
  });

  it("a module's meshes fold layout axes of that mesh, outer first, each axis once", () => {
    const order = { dense: ["dp_replicate", "dp_shard", "cp", "tp"], sparse: ["dp_replicate", "efsdp", "ep"] } as Record<string, string[]>;
    const py = pythonSide();
    expect(Object.keys(py.meshes).sort()).toEqual(["accelerate", "torchtitan", "transformers"]);
    for (const [name, meshes] of Object.entries(py.meshes)) {
      for (const [kind, dims] of Object.entries(meshes)) {
        const held = dims.flatMap(([, axes]) => axes);
        expect(held, `${name} MESHES.${kind}`).toEqual(order[kind]!.filter((a) => held.includes(a)));
      }
    }
    // torchtitan's fsdp dimension holds dp_shard and cp (parallel_dims.py build_mesh: fsdp = dp_shard * cp)
    expect(py.meshes.torchtitan!.dense).toContainEqual(["fsdp", ["dp_shard", "cp"]]);
  });

  it("an exported script carries the framework's support module verbatim, between its markers", () => {
    for (const [spec, layout, module] of [
      ["torch:torchtitan", "dp_shard2,cp2", "fw_torchtitan"],
      ["torch:torch-fsdp1", "dp_shard2", "fw_torch_fsdp1"],
      ["torch:deepspeed-engine", "dp_replicate2", "fw_deepspeed_engine"],
    ] as const) {
      const source = readFileSync(join(SUPPORT_DIR, `${module}.py`), "utf8");
      const name = spec.slice("torch:".length);
      const start = source.indexOf(`# ---- support: ${name} `);
      const endMark = `# ---- end support: ${name} `;
      const end = source.indexOf("\n", source.indexOf(endMark));
      expect(start, `${module}.py start marker`).toBeGreaterThanOrEqual(0);
      const text = source.slice(start, end === -1 ? undefined : end);
      expect(supportText(name)!.text).toBe(text);
      const { script } = buildExport(cell(spec, layout, "llama3-debug"), loadTorchSubject(spec) as TorchSubject, null, { frameworks: [] } as never);
      expect(script, `${spec}'s script holds ${module}.py's marked text`).toContain(text);
    }
    // torchrec's module (its GradientClippingOptimizer builder) goes into its scripts the same way; torchrec imports only
    // in environments of its own pins, so the marked text is held to the file here, the script by `clip-parity history`
    const trec = readFileSync(join(SUPPORT_DIR, "fw_torchrec.py"), "utf8");
    const at = trec.indexOf("# ---- support: torchrec ");
    expect(supportText("torchrec")).toEqual({ module: "fw_torchrec", text: trec.slice(at, trec.indexOf("\n", trec.indexOf("# ---- end support: torchrec "))) });
    // a framework without a module gets the harness's meshes, said so
    const { script } = buildExport(cell("torch:torch", "tp2", "llama3-debug"), loadTorchSubject("torch:torch") as TorchSubject, null, { frameworks: [] } as never);
    expect(script).toMatch(/^MESHES = \{\}/m);
  });
});

describe.runIf(torch.run)(`inputs as the frameworks' users build them${torch.skipNote}`, () => {
  it("one rank: plain tensors, so plain clip_grad_norm_ on a model with experts passes (DTensors on two meshes raised)", async () => {
    const c = cell("torch:torch.nn.utils:clip_grad_norm_", "single", "deepseek-v3-debug");
    const r = await runCell(c, { subject: await loadSubject(c.subject) });
    expect(failed(r)).toEqual([]);
  }, 180_000);

  it("FSDP1 wraps each transformer block: NO_SHARD on deepseek-v3-debug is within fp32 (one 38.7 M flat parameter was 1.8e-3 low)", async () => {
    const c = cell("torch:torch-fsdp1", "dp_replicate2", "deepseek-v3-debug");
    const r = await runCell(c, { subject: await loadSubject(c.subject) });
    expect(failed(r)).toEqual([]);
  }, 300_000);

  it("torchtitan's fsdp dimension (dp_shard x cp) reduces the norm in one collective, the harness's two dimensions in two", async () => {
    const c = cell("torch:torchtitan", "dp_shard2,cp2", "llama3-debug");
    const r = await runCell(c, { subject: await loadSubject(c.subject) });
    expect(failed(r)).toEqual([]);
    expect(r.comm.map((k) => k.calls)).toEqual([1, 1, 1, 1]);
  }, 300_000);
});
