/**
 * Why a framework cell failed, in the words its maintainers read: the root causes read from a cell's checks and
 * ranks (causesOf), each one's line, source, upstream status and severity (rootCause, from the framework file's
 * `explain`), and the one severity scale the CLI, the results file and docs/frameworks.md share (cellSeverity).
 * Pure functions of a cell's result: the frameworks run, the torch subject and the page all read them from here.
 */
import type { CauseVerdict, CellResult } from "../results/types.ts";

/** c10d's words for a collective a rank waited in past its timeout (gloo "Timed out waiting", NCCL "timeout"). */
export const COLLECTIVE_TIMEOUT_RE = /timed? ?out|timeout/i;

/** A rank's error that is c10d's timeout of a collective it waited in (collectiveTimeoutS): the hang itself, not a raise. */
export const isCollectiveTimeout = (msg: string) => COLLECTIVE_TIMEOUT_RE.test(msg);

/** Cause key -> its one line. Keys ending in ":" take a detail. */
export const CAUSES: Record<string, string> = {
  "two-meshes": "raises when a rank's gradients live on two meshes (dense and expert): one stack/foreach spans both (`All operands in aten.stack.default must have the same mesh`)",
  "cuda-only": "its clip hard-codes CUDA (`device='cuda'`, `torch.cuda.FloatTensor`): it cannot run on CPU ranks",
  "dtensor-collective": "hands a DTensor to a c10d collective (`c10d.allreduce_` has no sharding strategy): it does not take DTensor gradients",
  "no-pp-reduction": "no reduction over the pipeline: each PP stage returns (and clips by) the norm of its own parameters",
  "ranks-differ": "ranks of one stage return different norms",
  "mtp-twice": "the MTP replica of tok_embeddings is counted twice: the norm is too large on every rank",
  "replicated-counted": "replicated shards counted once per replica: the norm is too large",
  "norm-too-small": "the norm is too small on every rank: some gradients are not counted",
  "low-precision-rounding": "norm reduced in the gradients' low-precision dtype, beyond the bf16 class",
  unscaled: "a gradient keeps its unclipped values while clip_coef < 1",
  "replicas-differ": "tied copies are not scaled alike",
  "hang-nonfinite": "a stage raises on its non-finite norm before the PP all_reduce; the other stages wait in it (hang)",
  hang: "hang: some ranks never return",
  "dtype-mismatch-crash": "a stage without expert gradients reduces a float32 zero while the others reduce bfloat16: gloo aborts (`Received data size doesn't match`)",
  crash: "the ranks crash",
  "nonfinite-one-stage": "a non-finite norm is seen on one stage only: the other stages return a finite norm instead of raising",
  "nonfinite-silent": "error_if_nonfinite is set and the norm is non-finite, but ranks return instead of raising",
  "nonfinite-other-error": "raises on a non-finite norm, but another error than the non-finite one",
  "comm-budget": "more collectives across ranks than the fused optimum (one per distinct reduction group, + 1 for the PP reduction when there is PP): one per mesh, or per parameter group",
  "memory-peak": "scratch memory over budget",
  "memory-leak": "leaves tensors allocated after the clip",
  "raises:": "raises",
  "hang-raise:": "some ranks raise, the others wait in a collective (hang)",
  "other:": "",
};

/** A check message's first line, its reproduce command dropped: what the page and an exported script quote. */
export const messageHead = (m: string) => m.split("\n")[0]!.replace(/\s+reproduce:.*$/, "").trim();

function errorType(e: string): string {
  return /^(\w+):/.exec(e)?.[1] ?? "an error";
}

/** A rank's error that only says a peer's connection went away: a consequence of another rank's failure, never its cause. */
const PEER_GONE = /Connection closed by peer|Connection reset by peer/;

/** The causes of one failing cell, read from its checks and ranks. */
export function causesOf(r: CellResult): string[] {
  const fails = new Set(r.checks.filter((c) => c.status === "fail").map((c) => c.id));
  if (!fails.size) return [];
  const msg = (id: string) => r.checks.find((c) => c.id === id)?.message ?? "";
  const out: string[] = [];
  const add = (k: string) => {
    if (!out.includes(k)) out.push(k);
  };
  const errors = r.ranks.map((x) => x.error).filter((e): e is string => Boolean(e));
  const live = r.liveness ?? "";
  if (fails.has("liveness")) {
    // What the ranks that did return said: a rank that raised where the others went on into a collective.
    // (not c10d's timeout of a rank left waiting: that is the hang itself, seen by the rank)
    const raised = r.ranks.map((x) => x.error).filter((e): e is string => Boolean(e) && !/^the PyTorch adapter /.test(e!) && !isCollectiveTimeout(e!));
    if (/did not finish|timed out|never returned/.test(live)) {
      if (fails.has("errors.nonfinite")) add("hang-nonfinite");
      // the error a rank raised itself before one that only saw a peer's socket go (which rank sees which first is a race)
      else if (raised.length) add(`hang-raise:${(raised.find((e) => !PEER_GONE.test(e)) ?? raised[0]!).slice(0, 160)}`);
      else add("hang");
    }
    else if (/Received data size doesn't match|size mismatch/i.test(live)) add("dtype-mismatch-crash");
    else add("crash");
  }
  if (errors.length && !fails.has("liveness")) {
    const e = errors[0]!;
    if (/same mesh|different meshes/.test(e)) add("two-meshes");
    else if (/NVIDIA driver|cuda\.FloatTensor|CUDA|cuda/.test(e)) add("cuda-only");
    else if (/does not have a sharding strategy registered/.test(e) && /c10d/.test(e)) add("dtensor-collective");
    // errors.raised: a raise nothing asked for (a record made before that check existed shows it as parity.norm)
    else if (!/non-?finite/i.test(e) || fails.has("errors.raised") || fails.has("parity.norm")) add(`raises:${errorType(e)}: ${e.replace(/^\w+: /, "").slice(0, 140)}`);
  }
  const norms = r.ranks.filter((x) => typeof x.norm === "number").map((x) => x.norm!);
  const distinct = new Set(norms.map((n) => (Number.isNaN(n) ? "nan" : String(n))));
  if (fails.has("parity.ranks") || (r.cell.layout.pp > 1 && distinct.size > 1 && !errors.length)) add(r.cell.layout.pp > 1 ? "no-pp-reduction" : "ranks-differ");
  else if (fails.has("parity.norm") && !errors.length && !fails.has("liveness")) {
    const rel = Number(/relative error ([\d.e+-]+)/.exec(msg("parity.norm"))?.[1]);
    const norm = norms[0] ?? NaN;
    // float32 accumulation is within fp32-accum's bound: a float32 norm beyond it is a wrong quantity, judged by its sign below
    if (rel < 1e-3 && r.cell.dtype !== "f32") add("low-precision-rounding");
    else if (norm > r.referenceNorm && r.cell.model.startsWith("deepseek") && r.cell.layout.pp > 1) add("mtp-twice");
    else if (norm > r.referenceNorm) add("replicated-counted");
    else if (norm < r.referenceNorm) add("norm-too-small");
    else add(`other:${messageHead(msg("parity.norm"))}`);
  }
  if (fails.has("errors.nonfinite") && !fails.has("liveness")) {
    const m = msg("errors.nonfinite");
    if (/not for the non-finite norm/.test(m)) add("nonfinite-other-error");
    else if (r.cell.layout.pp > 1 && errors.length) add("nonfinite-one-stage");
    else add("nonfinite-silent");
  }
  if (fails.has("parity.tensors") && !errors.length) add(`other:${messageHead(msg("parity.tensors"))}`);
  if (fails.has("scaling.nonempty")) add("unscaled");
  if (fails.has("scaling.replicas")) add("replicas-differ");
  if (fails.has("comm.budget")) add("comm-budget");
  if (fails.has("memory.peak")) add("memory-peak");
  if (fails.has("memory.leak")) add("memory-leak");
  return out;
}

/**
 * One severity scale for every framework, highest first, shared by the CLI (`cell`, `run`), the results file and
 * docs/frameworks.md: a wrong result returned silently; a raise or a hang on a configuration the framework lists
 * (its users' step stops); memory beyond the clip's budget or left allocated; a right result at a cost beyond the
 * fused optimum (more collectives). All but the last are failures; a performance note is not.
 */
export const SEVERITY_SCALE = ["wrong result", "raise or hang", "excess memory", "performance note"] as const;
export type CauseSeverity = (typeof SEVERITY_SCALE)[number];

/** The severity of a cause without a `<key>#severity` in its framework's explain (a key, or its prefix up to the colon). */
const CAUSE_SEVERITY: Record<string, CauseSeverity> = {
  "comm-budget": "performance note",
  "memory-peak": "excess memory",
  "memory-leak": "excess memory",
  "two-meshes": "raise or hang",
  "cuda-only": "raise or hang",
  "dtensor-collective": "raise or hang",
  "hang-nonfinite": "raise or hang",
  hang: "raise or hang",
  "dtype-mismatch-crash": "raise or hang",
  crash: "raise or hang",
  "nonfinite-other-error": "raise or hang",
  "raises:": "raise or hang",
  "hang-raise:": "raise or hang",
};

/** The severity of a failed check when no cause was read from the cell (what each check's failure means). */
const CHECK_SEVERITY: Record<string, CauseSeverity> = {
  "comm.budget": "performance note",
  "memory.peak": "excess memory",
  "memory.leak": "excess memory",
  liveness: "raise or hang",
  "errors.raised": "raise or hang",
};

/** The highest of some severities (SEVERITY_SCALE order); null for none. */
export function highestSeverity(severities: Iterable<CauseSeverity>): CauseSeverity | null {
  let best: number | null = null;
  for (const s of severities) best = best === null ? SEVERITY_SCALE.indexOf(s) : Math.min(best, SEVERITY_SCALE.indexOf(s));
  return best === null ? null : SEVERITY_SCALE[best]!;
}

/**
 * The severity of a failing framework cell: the highest of its root causes'. Where none was read, or all read are
 * performance notes, its failed checks decide by what each means: a cause a framework file calls a performance note
 * cannot hide a wrong norm.
 */
export function cellSeverity(c: { readonly failed: readonly string[]; readonly causes: readonly string[] }, explain: Record<string, string> = {}): CauseSeverity | null {
  const byCause = highestSeverity(c.causes.map((k) => rootCause(k, explain).severity));
  if (byCause !== null && byCause !== "performance note") return byCause;
  return highestSeverity([...(byCause ? [byCause] : []), ...c.failed.map((id) => CHECK_SEVERITY[id] ?? "wrong result")]);
}

/** The upstream status of a cause without a `<key>#upstream` in its framework's explain (the same for every framework). */
const CAUSE_UPSTREAM: Record<string, string> = {
  "two-meshes":
    "open: https://github.com/pytorch/pytorch/issues/180346 (\"Expected: clip_grad_norm_ handles mixed meshes\"; its fix, https://github.com/pytorch/pytorch/pull/180501, was closed unmerged)",
};

/**
 * An explain entry's attributes, beside its text under the cause key: `<key>#source` the framework's file:function
 * where the cause lies, `<key>#upstream` "known: <link> ..." or "not known upstream", `<key>#severity` a CauseSeverity.
 */
const ATTRIBUTE = /#(source|upstream|severity)$/;

/** One root cause as the page lists it: its line, where it lies in the framework's source, its upstream status and severity. */
export interface RootCause {
  key: string;
  text: string;
  source: string | null;
  upstream: string;
  severity: CauseSeverity;
  /**
   * The shortest Python that shows the cause in one process with the framework alone (`<key>#minimal`), where a few
   * lines do; null where only the exported script (ranks, a layout) shows it.
   */
  minimal: string | null;
}

/** The explain key that covers a cause key: itself, or a prefix that holds the colon ("raises:IndexError" for "raises:IndexError: ..."). */
function explainKey(key: string, explain: Record<string, string>): string | null {
  if (explain[key] !== undefined) return key;
  return Object.keys(explain).find((k) => !ATTRIBUTE.test(k) && k.includes(":") && key.startsWith(k)) ?? null;
}

/** A cause key as its root cause: the framework's explain entry and its attributes, else the generic line. */
export function rootCause(key: string, explain: Record<string, string> = {}): RootCause {
  const at = explainKey(key, explain);
  const attr = (a: string) => (at !== null ? explain[`${at}#${a}`] : undefined) ?? explain[`${key}#${a}`];
  const base = key.includes(":") ? key.slice(0, key.indexOf(":") + 1) : key;
  const severity = attr("severity") ?? CAUSE_SEVERITY[key] ?? CAUSE_SEVERITY[base] ?? "wrong result";
  if (!(SEVERITY_SCALE as readonly string[]).includes(severity)) {
    throw new Error(`explain "${at ?? key}#severity": "${severity}" is not a severity (${SEVERITY_SCALE.join(", ")})`);
  }
  return {
    key,
    text: causeText(key, explain),
    source: attr("source") ?? null,
    upstream: attr("upstream") ?? CAUSE_UPSTREAM[key] ?? "not known upstream",
    severity: severity as CauseSeverity,
    minimal: attr("minimal") ?? null,
  };
}

/** A cause key as its line: the framework's own explanation when its file has one, else the generic line. */
export function causeText(key: string, explain: Record<string, string> = {}): string {
  // A key with a detail ("raises:IndexError: ...") is matched by any prefix that holds the colon.
  const at = explainKey(key, explain);
  const own = at !== null ? explain[at] : undefined;
  if (own) return own;
  const i = key.indexOf(":");
  if (i < 0) return CAUSES[key] ?? key;
  const kind = key.slice(0, i + 1);
  const detail = key.slice(i + 1);
  return kind === "raises:" ? `raises ${detail}` : kind === "hang-raise:" ? `some ranks raise ${detail}; the others wait in a collective (hang)` : detail;
}

/**
 * A failing cell of a torch: subject read as its maintainers would: its root causes and their highest severity
 * (`explain`: the framework file's; none for a plain function). Null for a cell that failed nothing.
 */
export function causeVerdict(r: CellResult, explain: Record<string, string> = {}, outside: string | null = null): CauseVerdict | null {
  const failed = r.checks.filter((c) => c.status === "fail").map((c) => c.id);
  if (!failed.length) return null;
  const keys = causesOf(r);
  const severity = cellSeverity({ failed, causes: keys }, explain) ?? "wrong result";
  const causes = keys.map((k) => {
    const { key: _, minimal, ...cause } = rootCause(k, explain);
    return minimal ? { ...cause, minimal } : cause;
  });
  return { severity, causes, ...(outside ? { outside } : {}) };
}
