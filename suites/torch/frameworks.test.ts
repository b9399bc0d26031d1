/**
 * Framework conventions (issue 16): the files validate, `clip-parity list subjects` can show them, bad files
 * and unknown names are refused with clear errors; docs/frameworks.md is exactly the rendering of the
 * committed data and a fresh run of a subset agrees with it; an exported script reproduces a torchtitan
 * failure under torchrun with torch alone (and says so when a cell passes).
 */
import { execa } from "execa";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { main as cli } from "../../cli/main.ts";
import { minimalOneLine, verdictText } from "../../cli/print.ts";
import { caseKey, casesFor, CI_SUBSET, runFrameworks, type FrameworkCellRecord, type FrameworksData } from "../../harness/external/frameworks-run.ts";
import { causesOf, highestSeverity, rootCause, SEVERITY_SCALE } from "../../harness/external/causes.ts";
import { foldCells, kindOf, naKind, renderFrameworks } from "../../scripts/docs/frameworks-page.ts";
import { frameworkCases } from "../../matrix/frameworks.ts";
import { parseLayout, SINGLE, worldSize } from "../../harness/layout/layout.ts";
import { exportCell, LAYOUT_ONLY_CHECKS, parseCellId, renderCall } from "../../harness/external/torch/export.ts";
import { noteCost } from "../../harness/external/note-cost.ts";
import { rankLines, runFindings } from "../../harness/external/torch/findings-run.ts";
import { listedFailures, reproduceListedFailures, runExportedScript, sameFindings } from "../../harness/external/torch/repro-run.ts";
import { applicability, cannotRunOn, getFramework, listFrameworkSubjects, loadFrameworks, outsideConfigurations, parseFrameworkFile, plainConvention } from "../../harness/external/torch/frameworks.ts";
import { PROJECT_ROOT, torchOptionsFromEnv } from "../../harness/external/torch/options.ts";
import { closeTorchSessions, declaredScratch, largestFlatShard, parseTorchSpec } from "../../harness/external/torch/subject.ts";
import memoryPeak from "../../harness/checks/memory-peak.ts";
import type { CheckContext } from "../../harness/checks/types.ts";
import type { ParamView } from "../../harness/subject/api.ts";
import { InputError } from "../../harness/errors.ts";
import { cellId } from "../../harness/cell/cell.ts";
import { torchAvailability } from "./torch-available.ts";

const torch = torchAvailability();
const DOC = join(PROJECT_ROOT, "docs", "frameworks.md");
const DATA = join(PROJECT_ROOT, "docs", "frameworks.json");
const MIB = 1024 * 1024;
const committed = (): FrameworksData => JSON.parse(readFileSync(DATA, "utf8")) as FrameworksData;

afterAll(async () => {
  await closeTorchSessions();
});

describe("causes of a hang", () => {
  // what runExternal reports when ranks 1-3 wait in a collective rank 0 skipped, and c10d's timeout ends the wait
  const timeout = "RuntimeError: [gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 10000ms for recv operation to complete";
  const hung = (rank0: { norm?: number; error?: string }) =>
    ({
      cell: { layout: parseLayout("dp_shard2,tp2"), dtype: "f32", regime: "active", model: "llama3-debug" },
      checks: [{ id: "liveness", status: "fail", message: `rank 1 timed out in a collective (a hang): ${timeout}` }],
      ranks: [rank0, { error: timeout }, { error: timeout }, { error: timeout }],
      liveness: `rank 1 timed out in a collective (a hang): ${timeout}`,
      referenceNorm: 1,
    }) as unknown as Parameters<typeof causesOf>[0];

  it("ranks that time out waiting are the hang itself, not ranks that raised", () => {
    expect(causesOf(hung({ norm: 0 }))).toEqual(["hang"]);
  });

  it("a rank that raised while the others waited is named", () => {
    expect(causesOf(hung({ error: "ValueError: boom" }))).toEqual(["hang-raise:ValueError: boom"]);
  });

  it("names the error a rank raised itself, not one that only saw a peer's connection go, whichever rank comes first", () => {
    const gone = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:561] Connection closed by peer [127.0.0.1]:35201";
    const c = hung({ error: gone });
    (c.ranks as { error?: string }[])[2] = { error: "RuntimeError: stack expects a non-empty TensorList" };
    expect(causesOf(c)).toEqual(["hang-raise:RuntimeError: stack expects a non-empty TensorList"]);
    // with no other error, the peer's is all there is
    expect(causesOf(hung({ error: gone }))).toEqual([`hang-raise:${gone.slice(0, 160)}`]);
  });
});

describe("framework files", () => {
  it("declare torch, torch-total-norm, torch-fsdp1, torchtitan, torchrec, transformers, accelerate, megatron-core, deepspeed, deepspeed-bf16, deepspeed-engine and deepspeed-zero, each a torch:<framework> subject", () => {
    const subjects = listFrameworkSubjects();
    expect(subjects.map((s) => s.framework).sort()).toEqual(["accelerate", "deepspeed", "deepspeed-bf16", "deepspeed-engine", "deepspeed-zero", "megatron-core", "torch", "torch-fsdp1", "torch-total-norm", "torchrec", "torchtitan", "transformers"]);
    for (const s of subjects) {
      expect(parseTorchSpec(s.spec)).toEqual({ kind: "framework", spec: s.spec, framework: s.framework, pins: [] });
      expect(s.description.length).toBeGreaterThan(20);
    }
  });

  it("torchtitan derives ep_enabled and pp_mesh as its trainer does, and keeps experts on the dense mesh at ep = 1", () => {
    const c = getFramework("torchtitan").convention;
    expect(c.experts).toBe("dense-mesh-when-ep1");
    expect(c.paths[0]!.steps[0]!.kwargs).toMatchObject({ ep_enabled: "ep_enabled", pp_mesh: "pp_mesh", foreach: { const: true } });
  });

  it("refuse a bad file with the file and the field", () => {
    const ok = JSON.parse(readFileSync(join(PROJECT_ROOT, "adapters", "torch", "frameworks", "torch.json"), "utf8"));
    const bad = (mut: (x: any) => void, name = "torch.json") => {
      const x = structuredClone(ok);
      mut(x);
      return () => parseFrameworkFile(`/x/${name}`, JSON.stringify(x));
    };
    expect(bad((x) => (x.convention.paths[0].steps[0].args[0] = "parameters"))).toThrow(/framework file \/x\/torch\.json is not valid:\n {2}convention\.paths\[0\]\.steps\[0\]\.args\[0\]/);
    expect(bad((x) => (x.convention.paths[0].steps[0].target = "clip_grad_norm_"))).toThrow(/target: expected module:qualname/);
    expect(bad((x) => (x.convention.paths[0].steps[0].args = [{ result: "total" }]))).toThrow(/\{"result": "total"\} is not saved by an earlier step/);
    // a receiver an argument source builds for the cell: only one that is an object with the method (ZeRO's optimizer)
    expect(bad((x) => (x.convention.paths[0].steps[0].receiver = { arg: "mpu" }))).toThrow(/convention\.paths\[0\]\.steps\[0\]\.receiver/);
    expect(bad(() => undefined, "other.json")).toThrow(/its name is "torch", so the file must be torch\.json/);
    expect(() => parseFrameworkFile("/x/torch.json", "{")).toThrow(InputError);
    // a finding shows a cause the file explains, with a script that is there
    const ds = JSON.parse(readFileSync(join(PROJECT_ROOT, "adapters", "torch", "frameworks", "deepspeed-bf16.json"), "utf8"));
    const badDs = (mut: (x: any) => void) => () => {
      const x = structuredClone(ds);
      mut(x);
      return parseFrameworkFile("/x/deepspeed-bf16.json", JSON.stringify(x));
    };
    expect(badDs(() => undefined)).not.toThrow();
    expect(badDs((x) => (x.findings[0].cause = "raises:KeyError"))).toThrow(/findings\[0\]\.cause: "raises:KeyError" is not a key of its explain \("raises:RuntimeError: stack expects a non-empty TensorList"/);
    expect(badDs((x) => (x.findings[0].script = "adapters/torch/findings/nope.py"))).toThrow(/findings\[0\]\.script: adapters\/torch\/findings\/nope\.py does not exist/);
    expect(badDs((x) => (x.findings[0].script = "/tmp/x.py"))).toThrow(/findings\[0\]\.script[\s\S]*expected adapters\/torch\/findings\/<name>\.py/);
    expect(() => getFramework("nope")).toThrow(/no framework "nope" in adapters\/torch\/frameworks\/ \(known: accelerate, .*transformers\)/);
  });

  it("say which cells a framework cannot be asked for", () => {
    const tf = getFramework("transformers").convention;
    expect(applicability(tf, { layout: SINGLE, normType: 1, regime: "active", errorIfNonfinite: false })).toMatch(/takes no norm_type: it computes the 2-norm only/);
    expect(applicability(tf, { layout: SINGLE, normType: 2, regime: "nonfinite-inf", errorIfNonfinite: true })).toMatch(/takes no error_if_nonfinite/);
    expect(applicability(tf, { layout: SINGLE, normType: 2, regime: "nonfinite-inf", errorIfNonfinite: false })).toBeNull();
    expect(applicability(getFramework("torch").convention, { layout: SINGLE, normType: Infinity, regime: "nonfinite-nan", errorIfNonfinite: true })).toBeNull();
    // FSDP1's flat parameters are built over the data-parallel axes only
    const fsdp1 = getFramework("torch-fsdp1").convention;
    const at = (layout: string) => ({ layout: parseLayout(layout), normType: 2, regime: "active", errorIfNonfinite: false });
    expect(applicability(fsdp1, at("dp_replicate2,dp_shard2"))).toBeNull();
    expect(applicability(fsdp1, at("dp_shard2,tp2,ep2"))).toBe("its inputs are built over dp_replicate x dp_shard only, and the layout has tp(2), ep(2)");
    expect(applicability(getFramework("torch").convention, at("dp_shard2,tp2,ep2"))).toBeNull();
  });

  it("may declare the scratch their clip takes by design, which memory.peak then holds them to, and nothing more", () => {
    // DeepSpeed ZeRO copies each piece of its partition (at most a whole parameter) to float64 for the norm
    const zero = getFramework("deepspeed-zero");
    const view = (globalShape: number[], len: number[]) => ({ globalShape, block: { start: len.map(() => 0), len } }) as unknown as ParamView;
    const params = [[view([1024, 512], [512, 512]), view([4096], [2048])], [view([8], [8])]];
    const { scratchBudget } = declaredScratch(zero, params);
    expect(scratchBudget!.bytes).toEqual([1024 * 512 * 8 + MIB, 8 * 8 + MIB]);
    expect(scratchBudget!.rule).toMatch(/^deepspeed-zero declares a 8-byte copy of its largest parameter \+ 1 MiB: get_grad_norm_direct copies each piece/);
    expect(declaredScratch(getFramework("torch"), params)).toEqual({});
    // DeepSpeed's bf16 engine without ZeRO: a float32 master gradient of every parameter the rank holds
    const engine = declaredScratch(getFramework("deepspeed-engine"), params).scratchBudget!;
    expect(engine.bytes).toEqual([(512 * 512 + 2048) * 4 + MIB, 8 * 4 + MIB]);
    expect(engine.rule).toMatch(/^deepspeed-engine declares a 4-byte copy of every parameter the rank holds \+ 1 MiB: FP16_UnfusedOptimizer\.step gives/);
    // FSDP1 takes a float32 norm of each flat parameter's shard: a wrapped block's parameters concatenated, split over dp_shard
    const named = (fqn: string, globalShape: number[]) => ({ fqn, name: fqn, globalShape, block: { start: [0], len: globalShape } }) as unknown as ParamView;
    const model = [named("tok_embeddings.weight", [1000]), named("layers.0.w1", [3000]), named("layers.0.w2", [3001]), named("layers.1.w1", [10]), named("norm.weight", [7])];
    expect(largestFlatShard(model, 2)).toBe(3001); // layers.0: 6001 elements in 2 shards, the last padded
    expect(largestFlatShard(model, 1)).toBe(6001);
    expect(largestFlatShard([named("layers.2.moe.experts.3.w1", [40]), named("layers.2.moe.experts.3.w2", [40]), named("layers.2.attn", [50])], 1)).toBe(80); // the innermost block
    const fsdp1 = declaredScratch(getFramework("torch-fsdp1"), [model], 2).scratchBudget!;
    expect(fsdp1.bytes).toEqual([3001 * 4 + MIB]);
    expect(fsdp1.rule).toMatch(/^torch-fsdp1 declares a 4-byte copy of its largest flat parameter shard \+ 1 MiB: _get_grad_norm/);
    // the check names the declared rule, and still fails over it (a replica of every gradient exceeds it)
    const memory = (scratchPeakBytes: number) => [{ rank: 0, gradBytes: 0, scratchPeakBytes, budgetBytes: scratchBudget!.bytes[0]!, budgetRule: scratchBudget!.rule, leakedBytes: 0, stages: [] }];
    const judge = (scratch: number) => memoryPeak.judge({ memory: memory(scratch), budgets: {} } as unknown as CheckContext);
    expect(judge(scratchBudget!.bytes[0]!).status).toBe("pass");
    const over = judge(scratchBudget!.bytes[0]! + 1);
    expect(over.status).toBe("fail");
    expect(over.message).toContain(`(${scratchBudget!.rule})`);
    // a file's scratch is validated like every other field
    const text = readFileSync(join(PROJECT_ROOT, "adapters/torch/frameworks/deepspeed-zero.json"), "utf8").replace('"bytesPerElement": 8', '"bytesPerElement": 0');
    expect(() => parseFrameworkFile("deepspeed-zero.json", text)).toThrow(/scratch\.bytesPerElement/);
  });

  it("say which cells lie outside the configurations a framework's trainer builds, and which cannot run on CPU ranks", () => {
    const at = (layout: string, model = "llama3-debug", more: object = {}) => ({ layout: parseLayout(layout), model, dtype: "f32" as const, normType: 2, regime: "active", errorIfNonfinite: false, ...more });
    const titan = getFramework("torchtitan");
    expect(outsideConfigurations(titan, at("pp2,dp_shard2", "deepseek-v3-debug"))).toMatch(/builds no MTP layer .* together with PP/);
    expect(outsideConfigurations(titan, at("pp2,dp_shard2"))).toBeNull();
    expect(outsideConfigurations(titan, at("dp_shard2", "llama3-debug", { normType: 1 }))).toMatch(/asks for the 2-norm only, not 1/);
    expect(outsideConfigurations(titan, at("dp_shard2", "llama3-debug", { regime: "nonfinite-nan", errorIfNonfinite: true }))).toMatch(/never asks its clip to raise/);
    for (const name of ["accelerate", "transformers", "torch"]) {
      expect(outsideConfigurations(getFramework(name), at("pp2,tp2")), name).toMatch(/builds no pp > 1/);
      expect(outsideConfigurations(getFramework(name), at("dp_shard2,tp2")), name).toBeNull();
    }
    const ds = getFramework("deepspeed");
    expect(outsideConfigurations(ds, at("dp_replicate2"))).toBeNull();
    expect(outsideConfigurations(ds, at("dp_shard2"))).toMatch(/builds no dp_shard > 1 \(it uses dp_replicate only\)/);
    expect(outsideConfigurations(ds, at("dp_replicate2", "llama3-debug", { dtype: "bf16" }))).toMatch(/gives its clip f32 gradients, not bf16/);
    // BF16_Optimizer.step skips the step on an invalid norm before it clips: a non-finite cell is not a call it makes
    const bf16 = getFramework("deepspeed-bf16");
    expect(outsideConfigurations(bf16, at("pp2,tp2", "deepseek-v3-debug"))).toBeNull();
    expect(outsideConfigurations(bf16, at("pp2,tp2", "llama3-debug", { regime: "nonfinite-inf" }))).toMatch(/skips the step on a non-finite norm before it clips/);
    expect(outsideConfigurations(bf16, at("dp_shard2"))).toMatch(/builds no dp_shard > 1/);
    // llama3-debug's 6 layers over 8 stages leave stage 4 without any (stage 0 has the embedding, stage 7 the output)
    expect(outsideConfigurations(bf16, at("pp8"))).toMatch(/builds no pipeline stage without parameters \(here stage 4 of 8 holds none\)/);
    expect(outsideConfigurations(bf16, at("pp7"))).toBeNull();
    expect(outsideConfigurations(getFramework("torchtitan"), at("pp8"))).toBeNull();
    for (const name of ["torch", "torchtitan"]) expect(outsideConfigurations(getFramework(name), at("tp2", "llama3-debug", { regime: "nonfinite-inf" })), name).toBeNull();
    expect(cannotRunOn(getFramework("megatron-core"), "cpu")).toMatch(/^needs CUDA/);
    expect(cannotRunOn(getFramework("megatron-core"), "cuda")).toBeNull();
    expect(cannotRunOn(titan, "cpu")).toBeNull();
  });

  it("run every case in the one precision their adapter builds, when it builds one only (an engine built for bf16)", () => {
    const all = frameworkCases();
    const engine = casesFor(getFramework("deepspeed-engine"), all);
    expect(new Set(engine.map((c) => c.dtype))).toEqual(new Set(["bf16"]));
    // each float32 case becomes its bf16 twin, once: a case that already had a bf16 twin is not run twice
    const twins = new Set(all.map((c) => caseKey({ ...c, dtype: "bf16" })));
    expect(engine.map(caseKey).sort()).toEqual([...twins].sort());
    expect(casesFor(getFramework("torch"), all).map(caseKey)).toEqual(all.map(caseKey));
  });

  it("render as plain Python calls, the way the trainer makes them", () => {
    const tf = renderCall(getFramework("transformers").convention, { foreach: null, expertsPresent: true });
    expect(tf).toMatch(/if has_mixed_dtensor\(q\.grad for q in P if q\.grad is not None\):/);
    expect(tf).toContain("return Trainer._mixed_mesh_grad_norm(None, ParamsModel(named), MAX_NORM)");
    expect(tf).toContain("return receiver_1().clip_grad_norm_(P, MAX_NORM)");
    expect(tf).toContain("class ParamsModel(torch.nn.Module):"); // only the helpers a convention uses
    expect(tf).not.toContain("def local_param(");
    const titan = renderCall(getFramework("torchtitan").convention, { foreach: null, expertsPresent: true });
    expect(titan).toContain('foreach=True, pp_mesh=meshes["pp"] if LAYOUT["pp"] > 1 else None, ep_enabled=LAYOUT["ep"] > 1)');
    const mg = renderCall(getFramework("megatron-core").convention, { foreach: null, expertsPresent: true });
    const code = mg.split("\n").filter((l) => !/^\s*#/.test(l)).join("\n"); // the steps, in order, without their why
    expect(code).toMatch(/total_norm = get_grad_norm_fp32\(\[q\.grad for q in LP if q\.grad is not None and q\.counted_in_norm\], norm_type=NORM_TYPE, grad_stats_parallel_group=dist\.group\.WORLD\)\n\s+ret = clip_grad_by_total_norm_fp32\(LP, MAX_NORM, total_norm\)\n\s+return total_norm/);
    // helpers only for the argument sources the rendered calls use: DeepSpeed's plain clip passes mpu=None (a
    // constant), so no mpu; a transformers cell whose ranks all took the accelerate path passes no model object
    const ds = renderCall(getFramework("deepspeed").convention, { foreach: null, expertsPresent: false });
    expect(ds).toContain("def local_param(p):");
    expect(ds).not.toContain("def mpu(");
    expect(ds).not.toContain("counted_in_norm");
    const bf16 = renderCall(getFramework("deepspeed-bf16").convention, { foreach: null, expertsPresent: false });
    expect(bf16).toContain("def mpu(");
    expect(bf16).not.toContain("def local_param(");
    // torchrec: the method on the GradientClippingOptimizer its support module builds (copied into the script)
    const trec = renderCall(getFramework("torchrec").convention, { foreach: null, expertsPresent: false });
    expect(trec).toContain("return build_optimizer(named, MAX_NORM, NORM_TYPE).clip_grad_norm_()");
    // DeepSpeed's engine: one engine (the support module's Bf16Engine) for both calls, its logged float rounded to float32
    const engine = renderCall(getFramework("deepspeed-engine").convention, { foreach: null, expertsPresent: false });
    expect(engine).toMatch(/ret = bf16_engine\(named\)\.step\(\)\n.*\n\s+global_grad_norm = bf16_engine\(named\)\.get_global_grad_norm\(\)/);
    expect(engine).toContain("bf16_engine.it = Bf16Engine(bf16_engine_grads(named), MAX_NORM)");
    expect(engine).toContain("return global_grad_norm_f32");
    const tfAcc = renderCall(getFramework("transformers").convention, { foreach: null, expertsPresent: false, taken: ["accelerate"] });
    expect(tfAcc).not.toContain("class ParamsModel");
    expect(tfAcc).not.toContain("has_mixed_dtensor");
    expect(mg).toContain("lp.grad, lp.counted_in_norm =");
    const plain = renderCall(plainConvention("torch.nn.utils:clip_grad_norm_"), { foreach: true, expertsPresent: false });
    expect(plain).toMatch(/if "foreach" in sig:\n\s+kw\["foreach"\] = True/);
    expect(plain).toMatch(/if "ep_enabled" in sig:\n\s+kw\["ep_enabled"\] = False/);
  });
});

describe("cell ids", () => {
  it("parse back into the cell they name, module-path subjects and suffixes included", () => {
    for (const id of [
      "torch:torchtitan/pp2,dp_shard2,ep2/deepseek-v3-debug/f32/n2/active/s0",
      "torch:torch.nn.utils:clip_grad_norm_/tp4/llama3-debug/bf16/ninf/nonfinite-nan/s7/noerr",
      "./my/subjects/clip.ts/single/llama3-debug/f16/n1.5/boundary/s3/max0.5/err/step2",
    ]) {
      expect(cellId(parseCellId(id))).toBe(id);
    }
    expect(parseCellId("torch:torch/tp2/llama3-debug/f32/n2/active/s0").layout).toMatchObject({ tp: 2, pp: 1 });
  });

  it("refuse what is not a cell id, naming the part", () => {
    expect(() => parseCellId("torch:torch/tp2/llama3-debug")).toThrow(/is not a cell id/);
    expect(() => parseCellId("torch:torch/tp2/llama9/f32/n2/active/s0")).toThrow(/model "llama9" is not one of/);
    expect(() => parseCellId("torch:torch/tp2/llama3-debug/f32/n2/warm/s0")).toThrow(/regime "warm"/);
    expect(() => parseCellId("torch:torch/tp2/llama3-debug/f32/n2/active/s0/fast")).toThrow(/"fast" is not maxX, err, noerr or stepK/);
  });

  it("clip-parity export refuses bad input with exit 2 before anything runs", async () => {
    const err: string[] = [];
    const write = process.stderr.write.bind(process.stderr);
    process.stderr.write = ((s: string) => (err.push(String(s)), true)) as typeof process.stderr.write;
    try {
      expect(await cli(["export", "--cell", "torch:torch/tp2/llama3-debug/f32/n2/active/s0"])).toBe(2);
      expect(await cli(["export", "--cell", "nonsense", "--out", "/tmp/x"])).toBe(2);
      expect(await cli(["export", "--cell", "titan/tp2/llama3-debug/f32/n2/active/s0", "--out", "/tmp/x"])).toBe(2);
      expect(await cli(["export", "--cell", "torch:torch/tp2/llama3-debug/f32/n2/active/s0", "--layout", "tp4", "--out", "/tmp/x"])).toBe(2);
      expect(await cli(["export", "--subject", "torch:torch", "--layout", "tp2", "--model", "llama3-debug", "--dtype", "f64", "--norm", "2", "--regime", "active", "--out", "/tmp/x"])).toBe(2);
    } finally {
      process.stderr.write = write;
    }
    const text = err.join("");
    expect(text).toMatch(/--out DIR is required/);
    expect(text).toMatch(/--cell "nonsense" is not a cell id/);
    expect(text).toMatch(/subject "titan" is not a torch: subject/);
    expect(text).toMatch(/--cell fixes the cell; --layout cannot be given with it/);
    expect(text).toMatch(/--dtype: "f64" is not one of f32, bf16, f16/);
  });
});

describe("docs/frameworks.md", () => {
  it("is exactly the rendering of docs/frameworks.json (generated, never hand-edited)", () => {
    expect(readFileSync(DOC, "utf8")).toBe(renderFrameworks(committed()));
  });

  it("lists only failures that reproduce standalone: each one's exported script printed REPRODUCED, minimised where the layout alone fails", () => {
    // npm run frameworks ran every listed failure's script under torchrun (repro-run.ts); the page must say so
    const failures = committed().frameworks.flatMap((f) => f.cells.filter((c) => c.status === "fail" && !c.outside).map((c) => ({ id: `${f.name} ${c.case}`, c })));
    expect(failures.length).toBeGreaterThan(0);
    for (const { id, c } of failures) {
      expect(c.repro, id).toBeDefined();
      expect(c.repro!.reproduced, id).toBe(true);
      // a failure of the layout alone reproduced by its minimised script (a few parameters, random gradients): the
      // generic builder, the framework's support text and comm.budget's own count make 150 lines at most
      if (c.failed.every((k) => LAYOUT_ONLY_CHECKS.has(k))) expect(c.repro!.minimised, id).toBe(true);
      expect(c.repro!.lines, id).toBeLessThanOrEqual(c.repro!.minimised ? 150 : 190);
      // what the script found failing is what clip-parity found (the checks it implements)
      expect(c.repro!.failed.length, id).toBeGreaterThan(0);
      for (const k of c.repro!.failed) expect(c.failed, id).toContain(k);
    }
    // a failure outside the configurations is not upstream material, and its script is not run
    for (const f of committed().frameworks) for (const c of f.cells) if (c.outside || c.status !== "fail") expect(c.repro, `${f.name} ${c.case}`).toBeUndefined();
  });

  it("runs the scripts of the failures in a framework's configurations only, and says which did not reproduce", () => {
    const [A, B, C, D, E] = ["single", "pp2", "tp2", "cp2", "dp_shard2"].map((l) => `${l}/llama3-debug/f32/n2/active/s0`);
    const cell = (c: string, status: FrameworkCellRecord["status"], more: Partial<FrameworkCellRecord> = {}): FrameworkCellRecord => ({ case: c, status, failed: status === "fail" ? ["parity.norm"] : [], messages: {}, causes: [], paths: [], ...more });
    const data: FrameworksData = {
      ...committed(),
      frameworks: [
        {
          name: "fw",
          package: "fw",
          version: "1",
          description: "d",
          trainer: "t",
          cells: [cell(A, "fail"), cell(B, "fail", { outside: "no pp" }), cell(C, "pass"), cell(D, "n/a"), cell(E, "fail")],
        },
      ],
    };
    expect(listedFailures(data).map((x) => x.id)).toEqual([`torch:fw/${A}`, `torch:fw/${E}`]);
    const row = (d: FrameworksData) => renderFrameworks(d, { fw: {} }).split("\n").find((l) => l.startsWith("| fw |"))!;
    expect(row(data)).toContain("| 2 (2 / 0 / 0) | not checked |");
    data.frameworks[0]!.cells[0]!.repro = { lines: 120, reproduced: true, failed: ["parity.norm"] };
    data.frameworks[0]!.cells[4]!.repro = { lines: 140, reproduced: false, failed: [] };
    expect(row(data)).toContain("| 2 (2 / 0 / 0) | 1 of 2 |");
    const page = renderFrameworks(data, { fw: {} });
    expect(page).toContain("Reproduced standalone: 1 of 2 failures (scripts of 140 lines at most).");
    expect(page).toContain(`Not reproduced by their scripts (1): \`${E}\`.`);
  });

  it("counts a script as reproducing a failure only when it fails the same checks (those a script implements), or hangs as it did", () => {
    // a script that raised an error of its own fails errors.raised: that is not the parity.tensors failure it was written for
    expect(sameFindings(["parity.tensors"], ["errors.raised"])).toBe(false);
    expect(sameFindings(["errors.raised"], ["errors.raised"])).toBe(true);
    expect(sameFindings(["parity.norm", "parity.ranks"], ["parity.norm"])).toBe(false);
    expect(sameFindings(["parity.norm", "parity.ranks"], ["parity.norm", "parity.ranks"])).toBe(true);
    expect(sameFindings(["parity.norm", "scaling.replicas"], ["parity.norm"])).toBe(true); // scaling.replicas: no script makes it
    expect(sameFindings(["liveness", "parity.norm"], ["liveness"])).toBe(true);
    expect(sameFindings(["liveness"], ["parity.norm"])).toBe(false);
    expect(sameFindings(["parity.norm"], ["liveness"])).toBe(false);
  });

  it("covers every declared framework over every case at the pinned versions, transformers by both Trainer paths", () => {
    const data = committed();
    const pins = Object.fromEntries(
      readFileSync(join(PROJECT_ROOT, "adapters", "torch", "requirements.txt"), "utf8")
        .concat(readFileSync(join(PROJECT_ROOT, "adapters", "torch", "requirements-nodeps.txt"), "utf8"))
        .split("\n")
        .map((l) => /^([\w.-]+)==([\w.]+)/.exec(l.trim()))
        .filter((m): m is RegExpExecArray => m !== null)
        .map((m) => [m[1]!, m[2]!]),
    );
    expect(data.frameworks.map((f) => f.name).sort()).toEqual([...loadFrameworks().keys()].sort());
    const declared = loadFrameworks();
    for (const f of data.frameworks) {
      const cases = casesFor(declared.get(f.name)!, frameworkCases()).map(caseKey);
      if (pins[f.package] === undefined) {
        // not installable over the pinned torch (torchrec: its kernels are built for one older torch): recorded with
        // why it did not import, run at its releases by `--with` and docs/history.md
        expect(f.error, f.name).toMatch(/is not pinned over the pinned torch/);
        expect(f.cells, f.name).toEqual([]);
        continue;
      }
      expect(f.version, f.name).toBe(pins[f.package]);
      expect(f.cells.map((c) => c.case), f.name).toEqual(cases);
    }
    const tf = data.frameworks.find((f) => f.name === "transformers")!;
    const paths = new Set(tf.cells.flatMap((c) => c.paths));
    expect([...paths].sort()).toEqual(["accelerate", "mixed-mesh"]);
    expect(data.torch).toBe(pins.torch);
    // every cell that ran carries its times, and the titan twin every case's (the page's Time per cell)
    for (const f of data.frameworks) for (const c of f.cells) expect(c.seconds !== undefined, `${f.name} ${c.case}`).toBe(c.status === "pass" || c.status === "fail");
    expect(Object.keys(data.native!.seconds)).toEqual(frameworkCases().map(caseKey));
  });

  it.runIf(torch.run)(
    "agrees with a fresh run of a subset: same verdicts, failed checks, causes and paths",
    async () => {
      const data = committed();
      expect(torch.info?.torch, "regenerate docs/frameworks.md (npm run frameworks) after a torch change").toBe(data.torch);
      const cases = frameworkCases().filter((c) => (CI_SUBSET.cases as readonly string[]).includes(caseKey(c)));
      expect(cases).toHaveLength(CI_SUBSET.cases.length);
      const fresh = await runFrameworks(CI_SUBSET.frameworks, cases, { ...torchOptionsFromEnv(), cellTimeoutS: data.cellTimeoutS });
      expect(Object.keys(fresh.data.native!.seconds)).toEqual(cases.map(caseKey)); // the titan twin ran every case
      for (const f of fresh.data.frameworks) {
        const old = data.frameworks.find((x) => x.name === f.name)!;
        expect(f.version, `${f.name}: installed version differs from docs/frameworks.json; npm run setup:torch, or npm run frameworks`).toBe(old.version);
        for (const c of f.cells) {
          const was = old.cells.find((x) => x.case === c.case)!;
          const pick = (x: typeof c) => ({ status: x.status, failed: x.failed, causes: x.causes, paths: x.paths });
          expect(pick(c), `${f.name} ${c.case}`).toEqual(pick(was));
          // a cell that ran is timed: the target's call and the adapter's share are parts of the cell's wall time
          if (c.status === "pass" || c.status === "fail") {
            const t = c.seconds!;
            expect(t.target, `${f.name} ${c.case}`).toBeGreaterThanOrEqual(0); // a target that raises at once rounds to 0 ms
            expect(t.adapter, `${f.name} ${c.case}`).toBeGreaterThan(0);
            expect(t.target + t.adapter, `${f.name} ${c.case}`).toBeLessThanOrEqual(t.cell + 0.002);
            // the adapter's share split by phase, every phase timed
            expect(Object.keys(t.phases ?? {}), `${f.name} ${c.case}`).toEqual(expect.arrayContaining(["inputs", "load", "params", "settle", "save", "results"]));
            for (const v of Object.values(t.phases!)) expect(v).toBeGreaterThanOrEqual(0);
          } else expect(c.seconds, `${f.name} ${c.case}`).toBeUndefined();
        }
      }
    },
    600_000,
  );
});

describe(`an exported script${torch.skipNote}`, () => {
  const dirs: string[] = [];
  afterAll(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });
  const python = torchOptionsFromEnv().python;
  const TITAN_MTP = "torch:torchtitan/pp2,dp_shard2,ep2/deepseek-v3-debug/f32/n2/active/s0";
  const TORCH_PASS = "torch:torch/dp_shard2,tp2/llama3-debug/f32/n2/active/s0";
  // a failure in a configuration torchtitan's trainer builds (one PP stage): the extra EP all_reduce
  const TITAN_COMM = "torch:torchtitan/cp2,tp2,ep2/deepseek-v3-debug/f32/n2/active/s0";

  async function exportTo(id: string, cost = false) {
    const dir = mkdtempSync(join(tmpdir(), "clip-parity-export-"));
    dirs.push(dir);
    // --no-run: what clip-parity saw is the committed record; the script alone must see it again.
    return exportCell({ cell: parseCellId(id), outDir: dir, run: false, cost });
  }

  async function exportAndRun(id: string) {
    const { path, data } = await exportTo(id);
    expect(data.script).not.toMatch(/^\s*(import|from)\s+(st_io|gen|adapter|agree|harness)\b/m);
    expect(data.script).not.toContain("sys.path");
    return runExportedScript(path, worldSize(data.cell.layout), python);
  }

  it.runIf(torch.run)("is upstream material: at most 150 lines minimised, framework, configuration, cause, expected against got, no placeholder", async () => {
    const rec = committed().frameworks.find((f) => f.name === "torchtitan")!.cells.find((c) => `torch:torchtitan/${c.case}` === TITAN_MTP)!;
    // a failure of the layout alone is minimised (a few parameters, no generator): at most 150 lines with comm.budget's
    // count of collectives across ranks (16 lines); a failure of the values makes only the checks that failed (and
    // errors.raised); a passing cell's makes them all
    for (const [id, most] of [[TITAN_COMM, 150], [TITAN_MTP, 190], [TORCH_PASS, 192]] as const) {
      const { script } = (await exportTo(id)).data;
      expect(script.endsWith("\n") && script.split("\n").length - 1, id).toBeLessThanOrEqual(most); // lines, as wc -l counts them
      expect(script, id).not.toMatch(/example\.com|TODO|XXX|placeholder/i);
      ast(script);
    }
    const { script } = (await exportTo(TITAN_MTP)).data;
    const doc = script.slice(0, script.indexOf('"""', 3)).replace(/\s+/g, " ");
    const titan = getFramework("torchtitan");
    expect(doc).toContain(`Framework: torchtitan ${committed().frameworks.find((f) => f.name === "torchtitan")!.version}`);
    expect(doc).toContain("Config: layout pp2,dp_shard2,ep2 (4 ranks), model deepseek-v3-debug, float32 gradients, 2-norm, regime active");
    // torchtitan raises NotImplementedError for MTP with PP: the header says this is not its trainer's configuration
    expect(doc).toMatch(/NOT a configuration torchtitan's trainer builds \(torchtitan's trainer builds no MTP layer/);
    // The cause in words: the framework's own explanation of each cause clip-parity found.
    expect(rec.causes).toEqual(["mtp-twice", "comm-budget"]);
    for (const k of rec.causes) expect(doc).toContain(titan.explain[k]!.replace(/\s+/g, " "));
    expect(doc).toContain("Expected: norm 3590.387451171875 on every rank (exact; the script recomputes it in float64)");
    expect(doc).toMatch(/Got: parity\.norm: rank 0: total norm 3614\.6123046875 != reference 3590\.387451171875/);
    expect(doc).toContain("comm.budget: rank 0 issued 3 collectives");
    // The cell as a handful of constants and the model as rows, not every rank's parameters.
    expect(script).toContain('WORLD, LAYOUT = 4, {"pp": 2, "dp_replicate": 1, "dp_shard": 2, "cp": 1, "tp": 1, "ep": 2}');
    expect(script).toMatch(/^MODEL = \[/m);
    expect(script.match(/^def generate\(/gm)).toHaveLength(1);
  });

  it.runIf(torch.run)(
    "minimises a failure of the layout alone: a parameter per stage and placement, random gradients; it reproduces, and not without the experts",
    async () => {
      const { path, data } = await exportTo(TITAN_COMM);
      expect(data.minimised).toBe(true);
      expect(data.script).not.toMatch(/^def generate\(|^import numpy|REFERENCE_NORM/m);
      const kept = /^TIES, LOGICAL = .*\n((?: {4}\(.*\),\n)+)\]/m.exec(data.script)![1]!.trim().split("\n");
      expect(kept.length).toBeLessThan(10); // of deepseek-v3-debug's 100
      const run = await runExportedScript(path, worldSize(data.cell.layout), python);
      expect(run.reproduced, run.stdout + run.stderr.slice(-2000)).toBe(true);
      expect(run.failed).toEqual(["comm.budget"]);
      // the experts' own mesh is what makes the extra all_reduce: without them the same script is within the budget
      writeFileSync(path, data.script.replace(/^ {4}\(.*"expert".*\),\n/gm, ""));
      const dense = await runExportedScript(path, worldSize(data.cell.layout), python);
      expect(dense.exitCode, dense.stdout + dense.stderr.slice(-2000)).toBe(0);
      expect(dense.stdout).toMatch(/^NOT REPRODUCED$/m);
      // --full: the whole cell, its generator and the norm compared
      const dir = mkdtempSync(join(tmpdir(), "clip-parity-export-"));
      dirs.push(dir);
      const whole = await exportCell({ cell: parseCellId(TITAN_COMM), outDir: dir, run: false, full: true });
      expect(whole.data.minimised).toBe(false);
      expect(whole.data.script).toMatch(/^def generate\(/m);
      // a minimised script that does not reproduce the listed failure is followed by the whole cell's: a record that
      // says tp2 failed comm.budget (it does not) is run twice, and the whole cell's run is the one recorded
      const forged: FrameworksData = {
        ...committed(),
        frameworks: [{ ...committed().frameworks.find((f) => f.name === "torchtitan")!, cells: [{ case: "tp2/llama3-debug/f32/n2/active/s0", status: "fail", failed: ["comm.budget"], messages: {}, causes: ["comm-budget"], paths: [] }] }],
      };
      const runs: boolean[] = [];
      expect(await reproduceListedFailures(forged, python, (_, repro) => runs.push(repro.minimised!))).toEqual({ reproduced: 0, of: 1 });
      expect(runs).toEqual([true, false]);
      expect(forged.frameworks[0]!.cells[0]!.repro).toMatchObject({ reproduced: false, minimised: false });
    },
    600_000,
  );

  it.runIf(torch.run)("a performance note's script with cost times the clip against its fused variant in pairs, the same norm from one all_reduce; without it, no timing code", async () => {
    const id = "torch:torchtitan/dp_shard2,ep2/deepseek-v3-debug/f32/n2/active/s0";
    const plain = (await exportTo(id)).data.script;
    expect(plain).not.toMatch(/fused_clip|REPRO_COST_PAIRS|^import time/m);
    const { path, data } = await exportTo(id, true);
    expect(data.script).toMatch(/^def fused_clip\(named\):/m);
    const run = await runExportedScript(path, 2, torchOptionsFromEnv().python, 300_000, { REPRO_COST_PAIRS: "5" });
    expect(run.reproduced, run.stdout + run.stderr).toBe(true);
    expect(run.failed).toEqual(["comm.budget"]);
    const cost = run.cost as { clip: number[]; fused: number[] };
    expect(cost.clip).toHaveLength(5);
    expect(cost.fused).toHaveLength(5);
    for (const t of [...cost.clip, ...cost.fused]) expect(t).toBeGreaterThan(0);
  }, 300_000);

  it.runIf(torch.run)("says when the framework does not support the configuration, and never reports it reproduced", async () => {
    const { script } = (await exportTo("torch:transformers/dp_shard2,tp2/llama3-debug/bf16/n1/inactive/s0")).data;
    const doc = script.slice(0, script.indexOf('"""', 3)).replace(/\s+/g, " ");
    expect(doc).toMatch(/Supported: NO: transformers does not support this configuration \(its clip takes no norm_type: it computes the 2-norm only, and the cell asks for 1\)/);
    expect(script).toMatch(/UNSUPPORTED = .*"\(transformers [^"]* does not support this configuration/);
    ast(script);
  });

  it.runIf(torch.run)("generates bit for bit what the adapter's generator (adapters/torch/gen.py) generates", async () => {
    const { path } = await exportTo(TORCH_PASS);
    // The script's generate() against gen.generate(): float32, bfloat16 and float16, several names, seeds, steps and
    // exponents, sizes across a chunk boundary of gen.py; compared as bytes.
    const code = [
      "import importlib.util, sys, torch",
      `sys.path.insert(0, ${JSON.stringify(join(PROJECT_ROOT, "adapters", "torch"))})`,
      "import gen",
      "spec = importlib.util.spec_from_file_location('repro', sys.argv[1]); repro = importlib.util.module_from_spec(spec); spec.loader.exec_module(repro)",
      "cases = [('tok_embeddings.weight', 'f32', 0, 0, 0, 1000), ('layers.3.moe.experts.w1', 'bf16', 7, 2, -20, 70000),",
      "         ('mtp.0.embed_tokens.weight', 'f16', 2**63 + 5, 1, -1, 4099), ('naïve/ü', 'f32', 123456789, 0, -20, 5), ('x', 'bf16', 1, 9, 0, 0)]",
      "for name, dtype, seed, step, exp, n in cases:",
      "    a = repro.generate(name, n, seed, step, dtype, exp)",
      "    b = gen.generate({'seed': seed, 'step': step, 'name': name, 'dtype': dtype, 'exp': exp, 'mode': 'gen'}, n, chunk=4096)",
      "    assert a.dtype == b.dtype and a.shape == b.shape, (name, a.dtype, b.dtype, a.shape, b.shape)",
      "    raw = lambda t: t.view({2: torch.int16, 4: torch.int32}[t.element_size()]).numpy().tobytes()  # a same-size view: the bits",
      "    assert raw(a) == raw(b), name",
      "print('same', len(cases))",
    ].join("\n");
    const r = await execa(python, ["-c", code, path], { reject: false, env: { PYTHONWARNINGS: "ignore" }, extendEnv: true });
    expect(r.stderr.slice(-2000) + r.stdout).toContain("same 5");
  });

  it.runIf(torch.run)(
    "reproduces torchtitan's MTP replica counted twice and its extra collective under torchrun, with torch alone",
    async () => {
      const rec = committed().frameworks.find((f) => f.name === "torchtitan")!.cells.find((c) => `torch:torchtitan/${c.case}` === TITAN_MTP)!;
      expect(rec.failed).toEqual(["parity.norm", "comm.budget"]);
      const r = await exportAndRun(TITAN_MTP);
      expect(r.exitCode, r.stderr.slice(-2000)).toBe(1);
      expect(r.reproduced).toBe(true);
      expect(r.failed).toEqual(rec.failed);
      // The very norm clip-parity's adapter saw ("total norm 3614.6123046875 != reference 3590.387451171875"), against
      // the script's own float64 norm with the bound and the relative error
      const norm = /total norm (\S+) != reference (\S+)/.exec(rec.messages["parity.norm"]!)!;
      expect(r.stdout).toContain(`clip-parity: ${norm[2]})`);
      expect(r.stdout).toMatch(new RegExp(`rank 0: expected [\\d.]+ \\(float64\\), got ${norm[1]!.replace(/\./g, "\\.")}, rel err [\\d.e-]+, bound [\\d.e-]+`));
    },
    600_000,
  );

  it.runIf(torch.run)(
    "reproduces a hang: the ranks left waiting time out in the clip's groups and the script reports liveness",
    async () => {
      // deepspeed-bf16 at pp8 (outside its configurations: stage 4 holds no parameter): that stage raises before the
      // all_reduce over the mpu's model-parallel group the other stages wait in
      const id = "torch:deepspeed-bf16/pp8/llama3-debug/f32/n2/active/s0";
      const rec = committed().frameworks.find((f) => f.name === "deepspeed-bf16")!.cells.find((c) => `torch:deepspeed-bf16/${c.case}` === id)!;
      // clip-parity names both: the stage that raised (errors.raised) and the ranks it left waiting (liveness)
      expect(rec.failed).toEqual(["liveness", "errors.raised"]);
      const { path, data } = await exportTo(id);
      const r = await runExportedScript(path, worldSize(data.cell.layout), python, 300_000, { REPRO_TIMEOUT_S: "10" });
      expect(r.reproduced, r.stdout + r.stderr.slice(-2000)).toBe(true);
      expect(r.failed).toEqual(["liveness"]);
      expect(r.stdout).toMatch(/^FAIL liveness: rank \d timed out in a collective \(a hang\)/m);
    },
    600_000,
  );

  it.runIf(torch.run)(
    "builds FSDP1's flat gradient shard and copies the clipped one back as the adapter does: its passes pass there too",
    async () => {
      // HYBRID_SHARD and FULL_SHARD: the parameters' clipped shards come back from FSDP1's flat ones (parity.tensors reads them)
      for (const id of ["torch:torch-fsdp1/dp_replicate2,dp_shard2/llama3-debug/f32/n2/active/s0", "torch:torch-fsdp1/dp_shard4/llama3-debug/f32/n1/sparse/s0"]) {
        const { data } = await exportTo(id);
        expect(data.script).toContain("fsdp1_write_back(named)");
        const r = await exportAndRun(id);
        expect(r.exitCode, r.stdout + r.stderr.slice(-2000)).toBe(0);
        expect(r.failed).toEqual([]);
      }
      // a bf16 cell FSDP1 passes only because the bf16 class accepts its float32 coefficient rounded to bfloat16
      const bf16 = "torch:torch-fsdp1/dp_replicate2,dp_shard2/deepseek-v3-debug/bf16/n1/active/s0";
      expect(committed().frameworks.find((f) => f.name === "torch-fsdp1")!.cells.find((c) => `torch:torch-fsdp1/${c.case}` === bf16)!.status).toBe("pass");
      const low = await exportAndRun(bf16);
      expect(low.exitCode, low.stdout + low.stderr.slice(-2000)).toBe(0);
    },
    600_000,
  );

  it.runIf(torch.run)(
    "builds ZeRO's partitions as its step() does and copies the clipped ones back: its passes pass standalone, and the same script fails with the bugs the checks are for",
    async () => {
      const passes = (id: string) => expect(committed().frameworks.find((f) => f.name === "deepspeed-zero")!.cells.find((c) => `torch:deepspeed-zero/${c.case}` === id)!.status).toBe("pass");
      // deepseek at dp_shard2: the experts (on their own size-1 mesh at ep = 1) are flattened with the rest
      const dp = "torch:deepspeed-zero/dp_shard2/deepseek-v3-debug/f32/n2/active/s0";
      passes(dp);
      const ok = await exportAndRun(dp);
      expect(ok.exitCode, ok.stdout + ok.stderr.slice(-2000)).toBe(0);
      expect(ok.failed).toEqual([]);
      // FSDP2 x TP: the engine gets the mpu, the tp-split parameters carry tensor_model_parallel
      const tp = "torch:deepspeed-zero/dp_shard2,tp2/llama3-debug/f32/n2/active/s0";
      passes(tp);
      const { path, data } = await exportTo(tp);
      expect(data.script).toContain("zero_write_back(named)");
      const tpOk = await runExportedScript(path, 4, python);
      expect(tpOk.exitCode, tpOk.stdout + tpOk.stderr.slice(-2000)).toBe(0);
      expect(tpOk.failed).toEqual([]);
      // the norm not reduced over the data-parallel group (each rank's partition taken for the whole), nor over the
      // model-parallel one (each tp rank's split taken for the whole), then the clipped partitions never reaching the
      // parameters (the clip dropped)
      const broken = [
        // (the data-parallel group swapped for the norm alone: the write-back still gathers over the real one)
        [
          data.script.replace(
            "    scaled_global_grad_norm = zero_root(named).scaled_global_norm()\n",
            "    opt, one = zero_root(named), dist.new_subgroups(group_size=1)[0]\n    opt.dp_process_group, dp = one, opt.dp_process_group\n" +
              "    scaled_global_grad_norm = opt.scaled_global_norm()\n    opt.dp_process_group = dp\n",
          ),
          "parity.norm",
        ],
        [data.script.replace("    zero_root.opt = opt\n", "    opt.model_parallel_group = None\n    zero_root.opt = opt\n"), "parity.norm"],
        [data.script.replace("    zero_write_back(named)\n", ""), "parity.tensors"],
      ] as const;
      for (const [script, check] of broken) {
        expect(script).not.toBe(data.script);
        writeFileSync(path, script);
        const r = await runExportedScript(path, 4, python);
        expect(r.failed, r.stdout + r.stderr.slice(-2000)).toContain(check);
      }
    },
    600_000,
  );

  it.runIf(torch.run)(
    "says NOT REPRODUCED when the cell passes (exit 0), so a reproduction is not a foregone conclusion",
    async () => {
      const r = await exportAndRun(TORCH_PASS);
      expect(r.exitCode, r.stdout + r.stderr.slice(-2000)).toBe(0);
      expect(r.stdout).toMatch(/^NOT REPRODUCED$/m);
      expect(r.stdout).not.toMatch(/^FAIL/m);
      expect(r.reproduced).toBe(false); // what npm run frameworks records for a listed failure that does not reproduce
      expect(r.failed).toEqual([]);
      // the script's own mpu (pp x tp) and DeepSpeed's marks agree with the adapter's: a pass there is a pass here
      const ds = await exportAndRun("torch:deepspeed-bf16/pp2,tp2/deepseek-v3-debug/f32/n2/active/s0");
      expect(ds.exitCode, ds.stdout + ds.stderr.slice(-2000)).toBe(0);
      expect(ds.failed).toEqual([]);
      // a bf16 cell torch passes only because the bf16 class accepts its coefficient computed in bfloat16: the script
      // applies the same rule, so its own verdict is a pass too
      const bf16 = "torch:torch/dp_replicate2,dp_shard2/llama3-debug/bf16/n2/active/s0";
      expect(committed().frameworks.find((f) => f.name === "torch")!.cells.find((c) => `torch:torch/${c.case}` === bf16)!.status).toBe("pass");
      const appended = /^ {4}coefs\.append\(.*torch\.tensor\(norm, dtype=TORCH_DTYPE\[DTYPE\]\)/m;
      expect((await exportTo(bf16)).data.script).toMatch(appended);
      expect((await exportTo(TORCH_PASS)).data.script).not.toMatch(appended); // float32 cells: the float32 coefficient only
      const low = await exportAndRun(bf16);
      expect(low.exitCode, low.stdout + low.stderr.slice(-2000)).toBe(0);
      expect(low.failed).toEqual([]);
    },
    600_000,
  );
});

/** The script parses as Python. */
function ast(script: string): void {
  const path = join(mkdtempSync(join(tmpdir(), "cp-export-ast-")), "repro.py");
  writeFileSync(path, script);
  execFileSync(torchOptionsFromEnv().python, ["-c", "import ast, sys; ast.parse(open(sys.argv[1], encoding='utf-8').read())", path]);
  rmSync(dirname(path), { recursive: true, force: true });
}

describe("docs/frameworks.md: root causes, severities and what is not a failure", () => {
  const rec = (c: string, more: Partial<FrameworkCellRecord> = {}): FrameworkCellRecord => ({ case: c, status: "fail", failed: ["parity.norm"], messages: {}, causes: [], paths: [], ...more });
  const framework = (name: string, cells: FrameworkCellRecord[]) => ({ name, package: name, version: "1", description: "d", trainer: "t", cells });
  const page = (frameworks: FrameworksData["frameworks"], explain: Record<string, Record<string, string>>) => renderFrameworks({ ...committed(), native: undefined, frameworks }, explain);

  it("one severity scale: a wrong result > a raise or hang > excess memory > a performance note, the last not a failure", () => {
    expect(SEVERITY_SCALE).toEqual(["wrong result", "raise or hang", "excess memory", "performance note"]);
    // DTensor's mixed-mesh raise is a raise on a configuration torch lists (ep), not "unsupported input"
    expect(kindOf(rec("a", { failed: ["errors.raised"], causes: ["two-meshes"] }))).toBe("raise or hang");
    expect(kindOf(rec("a", { failed: ["comm.budget"], causes: ["comm-budget"] }))).toBe("performance note");
    expect(kindOf(rec("a", { failed: ["memory.peak"], causes: ["memory-peak"] }))).toBe("excess memory");
    // a cell with a wrong norm as well takes the highest severity, whatever else it shows
    expect(kindOf(rec("a", { failed: ["parity.norm", "comm.budget"], causes: ["mtp-twice", "comm-budget"] }))).toBe("wrong result");
    expect(kindOf(rec("a", { failed: ["liveness", "errors.raised"], causes: ["hang-raise:RuntimeError: x"] }))).toBe("raise or hang");
    // no cause read: the failed checks' meanings decide
    expect(kindOf(rec("a", { failed: ["comm.budget"] }))).toBe("performance note");
    expect(kindOf(rec("a", { failed: ["liveness"] }))).toBe("raise or hang");
    expect(kindOf(rec("a"))).toBe("wrong result");
    // a framework file may grade a cause itself; a cause it calls a performance note cannot hide a failed check that is worse
    expect(kindOf(rec("a", { causes: ["norm-too-small"] }), { "norm-too-small#severity": "raise or hang" })).toBe("raise or hang");
    expect(kindOf(rec("a", { causes: ["norm-too-small"] }), { "norm-too-small#severity": "performance note" })).toBe("wrong result");
    expect(() => rootCause("x", { "x#severity": "minor" })).toThrow(/explain "x#severity": "minor" is not a severity/);
    expect(highestSeverity(["performance note", "excess memory", "raise or hang"])).toBe("raise or hang");
    expect(highestSeverity([])).toBeNull();
  });

  it("a root cause carries its source and upstream status as the record has it: the framework file's, else torch's open issue for two meshes, else not known upstream", () => {
    expect(rootCause("two-meshes").upstream).toMatch(/^open: https:\/\/github\.com\/pytorch\/pytorch\/issues\/180346 .*pull\/180501, was closed unmerged/);
    expect(rootCause("two-meshes").upstream).not.toMatch(/by design/);
    expect(rootCause("mtp-twice")).toMatchObject({ source: null, upstream: "not known upstream", severity: "wrong result" });
    const ex = { "raises:IndexError": "no gradient", "raises:IndexError#source": "ds/utils.py:clip_grad_norm_", "raises:IndexError#upstream": "known: https://x/1" };
    expect(rootCause("raises:IndexError: list index out of range", ex)).toMatchObject({ text: "no gradient", source: "ds/utils.py:clip_grad_norm_", upstream: "known: https://x/1", severity: "raise or hang", minimal: null });
    // a cause's shortest reproduction goes to the page (under Root causes) and to the CLI's cause line
    const short = rootCause("raises:IndexError: x", { ...ex, "raises:IndexError#minimal": "from ds import f\nf([])  # IndexError" });
    expect(short.minimal).toBe("from ds import f\nf([])  # IndexError");
    const { key: _, ...cause } = short;
    expect(verdictText({ severity: "raise or hang", causes: [{ ...cause, minimal: short.minimal! }] })).toBe(
      "  severity: raise or hang\n    cause (raise or hang): no gradient [ds/utils.py:clip_grad_norm_]; upstream: known: https://x/1\n" +
        '      in one process: python -c "from ds import f; f([])"\n',
    );
    const page = readFileSync(join(PROJECT_ROOT, "docs", "frameworks.md"), "utf8");
    expect(page).toContain("```python\nfrom deepspeed.runtime.utils import get_global_norm_of_tensors\nget_global_norm_of_tensors([])");
  });

  it("folds a layout's variant cells into one entry, and n/a says whether the framework or the adapter cannot do it", () => {
    expect(foldCells(["tp2/m/f32/n2/active/s0", "tp2/m/bf16/n1/zeros/s0", "pp2/m/f32/n2/active/s0"])).toBe("`tp2/m` ×2, `pp2/m`");
    expect(naKind("its clip takes no norm_type: it computes the 2-norm only, and the cell asks for 1")).toBe("cannot be asked");
    expect(naKind("its inputs are built over dp_replicate x dp_shard only, and the layout has tp(2)")).toBe("not built");
  });

  it("lists one row per root cause with its cells, source, upstream status and severity; frameworks sharing a code path share a row; notes apart", () => {
    const ex = { two: "one stack over two meshes", "two#severity": "raise or hang", "two#source": "clip_grad.py:_get_total_norm", wrong: "the norm is wrong", "wrong#source": "f.py:g" };
    const cells = [
      rec("tp2/llama3-debug/f32/n2/active/s0", { causes: ["wrong"] }),
      rec("tp2/llama3-debug/bf16/n1/zeros/s0", { causes: ["wrong"] }),
      rec("dp_shard2,ep2/deepseek-v3-debug/f32/n2/active/s0", { failed: ["errors.raised"], causes: ["two"] }),
      rec("dp_shard4,ep4/deepseek-v3-debug/f32/n2/active/s0", { failed: ["comm.budget"], causes: ["comm-budget"] }),
    ];
    const md = page([framework("a", cells), framework("b", cells.map((c) => ({ ...c })))], { a: ex, b: ex });
    expect(md).toContain("| a | a 1 | 4 | 0 | 0 | 3 (2 / 1 / 0) | not checked | 1 |");
    expect(md).toContain("| the norm is wrong | wrong result | a (2), b (2) | not checked | `f.py:g` | not known upstream |");
    expect(md).toContain("| one stack over two meshes | raise or hang | a (1), b (1) | not checked | `clip_grad.py:_get_total_norm` | not known upstream |");
    // each root cause says how many of its cells the exported scripts reproduced, how long they were and whether minimised
    cells[2]!.repro = { lines: 96, reproduced: true, failed: ["errors.raised"], minimised: true };
    const withRepro = page([framework("a", cells)], { a: ex });
    expect(withRepro).toContain("| one stack over two meshes | raise or hang | a (1) | 1 of 1 (96 lines at most, all minimised) |");
    expect(withRepro).toContain("| the norm is wrong | wrong result | a (2) | not checked |");
    expect(md).toContain("| the norm is wrong | wrong result | 2: `tp2/llama3-debug` ×2 | `f.py:g` | not known upstream |");
    expect(md).toMatch(/Performance notes \(the norm is right; more collectives than the fused optimum; not counted as a failure\):\n\n\| root cause[^\n]*\n[^\n]*\n\| more collectives across ranks than the fused optimum/);
    // the verdict line in words, the grid (a wrong result in every-gradient-scaled is not counted: its checks were parity.norm),
    // and per listed failure the line that reruns it and the script's path
    expect(md).toMatch(/^- \[\*\*a\*\*\]\(#a-a-1\) \(a 1\): \*\*fails\*\* 3 of 4 cells in its configurations: 2 wrong result \(the norm is wrong, not known upstream\); 1 raise or hang \(one stack over two meshes, not known upstream\); 0 of 4 pass, 1 with a performance note only\.$/m);
    expect(md).toMatch(/^\| a \| n\/a \| \[pass 2\]\(#a-a-1\) \| \[pass 4\]\(#a-a-1\) \| \[pass 4\]\(#a-a-1\) \| \[\*\*fail\*\* 1 of 2\]\(#a-a-1\) \| n\/a \| n\/a \|$/m);
    expect(md).toContain("- the norm is wrong: `npx clip-parity cell --subject torch:a --layout tp2 --model llama3-debug --dtype f32 --norm 2 --regime active --seed 0`; `npx clip-parity export --cell torch:a/tp2/llama3-debug/f32/n2/active/s0 --no-run --out repros` writes `repros/repro-torch-a-tp2-llama3-debug-f32-n2-active-s0.py`");
  });

  it("a performance note's cost is the median of paired savings, measurable only where their interquartile range lies above 0", () => {
    // the clip takes 1 ms more in every pair: measurable
    const clear = noteCost({ clip: [2, 2.1, 1.9, 2, 2.2, 2, 2.05].map((x) => x / 1000), fused: [1, 1.1, 0.9, 1, 1.2, 1, 1.05].map((x) => x / 1000) });
    expect(clear).toMatchObject({ pairs: 7, savedS: 0.001, measurable: true });
    expect(clear.savedIqrS[0]).toBeCloseTo(0.001, 9);
    // noise: savings of both signs, the interquartile range reaches 0
    const noise = noteCost({ clip: [1, 1.3, 0.8, 1.1, 0.9, 1.2], fused: [1.1, 1, 1, 1, 1, 1] });
    expect(noise.measurable).toBe(false);
    expect(noise.savedIqrS[0]).toBeLessThanOrEqual(0);
    expect(() => noteCost({ clip: [1, 1, 1, 1], fused: [1, 1, 1, 1] })).toThrow(/at least 5 pairs/);
    // the page: the cost table and the verdict line's summary
    const note = (c: string, cost: FrameworkCellRecord["repro"]) => rec(c, { failed: ["comm.budget"], causes: ["comm-budget"], repro: cost });
    const md = page([framework("tt", [
      note("dp_shard2,ep2/deepseek-v3-debug/f32/n2/active/s0", { lines: 140, reproduced: true, failed: ["comm.budget"], minimised: true, cost: clear }),
      note("dp_shard4,ep4/deepseek-v3-debug/f32/n2/active/s0", { lines: 140, reproduced: true, failed: ["comm.budget"], minimised: true, cost: noise }),
      note("pp2,dp_shard2,ep2/deepseek-v3-debug/f32/n2/active/s0", { lines: 140, reproduced: true, failed: ["comm.budget"], minimised: true, costNotTimed: "fused_clip sums over every rank: a p-norm without pipeline stages only" }),
    ])], {});
    expect(md).toContain("| tt | dp_shard2,ep2/deepseek-v3-debug/f32/n2/active/s0 | 2000 us | 1000 us | 1000 us (1000 us to 1000 us) |");
    expect(md).toContain("| tt | dp_shard4,ep4/deepseek-v3-debug/f32/n2/active/s0 | 1050000 us | 1000000 us | no measurable cost (0 us; -100000 us to 175000 us) |");
    expect(md).toContain("| tt | pp2,dp_shard2,ep2/deepseek-v3-debug/f32/n2/active/s0 | - | - | not timed: fused_clip sums over every rank: a p-norm without pipeline stages only |");
    expect(md).toContain("3 with a performance note only (measured: 1000 us saved per clip by one all_reduce in 1 of 2 timed; no measurable cost in 1 of 2 timed)");
  });

  it("a framework none of whose cells ran reads NOT TESTED with the reason; one whose passes are all vacuous says so", () => {
    const notRun = rec("tp2/llama3-debug/f32/n2/active/s0", { status: "not run", failed: [], cannotRun: "needs CUDA: no GPU here" });
    const vacuous = rec("tp2/llama3-debug/f32/n2/active/s0", { status: "pass", failed: [], vacuous: "a clip that returns 0 passes it too" });
    const md = page([framework("mg", [notRun]), framework("ds", [vacuous])], {});
    expect(md).toContain("| mg | mg 1 | NOT TESTED: needs CUDA: no GPU here |");
    expect(md).toContain("| ds | ds 1 | 1 | 0 (all 1 passes vacuous) |");
    expect(md).toContain("Every pass is vacuous: these cells show nothing of its clip passing.");
  });

  it.runIf(torch.run)("a cause's shortest reproduction (#minimal) runs in one process with the pinned framework, as written and as the CLI's one line, and raises the error its cause names", () => {
    let seen = 0;
    const stderrOf = (code: string) => {
      try {
        execFileSync(torchOptionsFromEnv().python, ["-c", code], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], timeout: 120_000 });
        return "";
      } catch (err) {
        return String((err as { stderr?: string }).stderr ?? "");
      }
    };
    for (const [name, fw] of loadFrameworks()) {
      for (const [key, code] of Object.entries(fw.explain ?? {})) {
        if (!key.endsWith("#minimal")) continue;
        seen++;
        // the error the cause key names ("raises:<error>"), else the one its last line's comment names
        const error = /^(?:raises|hang-raise):(.+)$/.exec(key.slice(0, -"#minimal".length))?.[1] ?? /#\s*(\w+Error: .+)$/.exec(code.split("\n").at(-1)!)?.[1];
        expect(error, `${name} ${key}: a #minimal names its error (in its cause key or its last line's comment)`).toBeDefined();
        expect(stderrOf(code), `${name} ${key}`).toContain(error!);
        expect(stderrOf(minimalOneLine(code)), `${name} ${key} as one line`).toContain(error!);
      }
    }
    expect(seen).toBeGreaterThanOrEqual(3);
  }, 300_000);

  it("shows the DeepSpeed finding through engine.step and train_batch: no PP every rank raises, with PP the frozen stage raises and the other hangs, the control returns one norm", () => {
    const fw = committed().frameworks.find((f) => f.name === "deepspeed-bf16")!;
    const [finding] = fw.findings ?? [];
    expect(finding?.cause).toBe("raises:RuntimeError: stack expects a non-empty TensorList");
    const [noPp, pp, control] = finding!.runs;
    const raised = / step raised RuntimeError: stack expects a non-empty TensorList$/;
    expect(noPp!.lines).toHaveLength(2);
    for (const l of noPp!.lines) expect(l).toMatch(raised);
    expect(pp!.lines[0]).toMatch(/^rank 0 \(stage 0, BF16_Optimizer\): hang: still in the step after 20 s, waiting in .*get_global_norm_of_tensors > c10d\.all_reduce$/);
    expect(pp!.lines[1]).toMatch(/^rank 1 \(stage 1, BF16_Optimizer\)/);
    expect(pp!.lines[1]).toMatch(raised);
    const norms = control!.lines.map((l) => /step returned, norm (\S+)$/.exec(l)?.[1]);
    expect(norms).toHaveLength(2);
    expect(new Set(norms).size).toBe(1);
    expect(Number(norms[0])).toBeGreaterThan(0);
    // the page shows each run's command and its ranks' lines
    const md = readFileSync(DOC, "utf8");
    for (const r of finding!.runs) expect(md).toContain(["```", `$ ${r.command}`, ...r.lines, "```"].join("\n"));
    expect(md).toContain("Through deepspeed-bf16's own entry point (`adapters/torch/findings/deepspeed_frozen_stage.py`");
  });

  it("reads a finding's rank lines in rank order, splitting a line another rank's output ran into", () => {
    const out = "noise\nrank 1 (stage 1, X): step returned, norm 0.5rank 0 (stage 0, X): step returned, norm 0.5\n[rank0]: warning\nrank 2 (stage 2, X): hang\n";
    expect(rankLines(out)).toEqual(["rank 0 (stage 0, X): step returned, norm 0.5", "rank 1 (stage 1, X): step returned, norm 0.5", "rank 2 (stage 2, X): hang"]);
  });

  it.runIf(torch.run)("a framework's findings print again what the page recorded, rank by rank, when run fresh", async () => {
    let seen = 0;
    for (const rec of committed().frameworks.filter((f) => f.findings?.length)) {
      const fresh = await runFindings(getFramework(rec.name), torchOptionsFromEnv().python);
      expect(fresh.map((f) => f.runs.map((r) => [r.command, r.lines]))).toEqual(rec.findings!.map((f) => f.runs.map((r) => [r.command, r.lines])));
      seen += fresh.length;
    }
    expect(seen).toBeGreaterThan(0);
  }, 600_000);

  it("links a framework's shipped bugs in docs/history.md from its verdict line, and keeps the harness's timing below the fold", () => {
    const md = readFileSync(join(PROJECT_ROOT, "docs", "frameworks.md"), "utf8");
    const line = (name: string) => md.split("\n").find((l) => l.startsWith(`- [**${name}**]`))!;
    expect(line("torchtitan")).toContain("[torchtitan-ep-empty-non-expert](history.md#torchtitan-ep-empty-non-expert)");
    expect(line("deepspeed-engine")).toContain("[deepspeed-bf16-no-zero-loss-scale](history.md#deepspeed-bf16-no-zero-loss-scale)");
    expect(line("accelerate")).not.toContain("history.md");
    const history = readFileSync(join(PROJECT_ROOT, "docs", "history.md"), "utf8");
    for (const [, id] of md.matchAll(/\]\(history\.md#([\w-]+)\)/g)) expect(history, id).toContain(`\n## ${id}\n`);
    const sections = [...md.matchAll(/^## (.+)$/gm)].map((m) => m[1]!);
    expect(sections.slice(0, 3)).toEqual(["Verdicts", "Bug classes", "Root causes"]);
    expect(sections.at(-1)).toBe("Time per cell");
  });
});
