/**
 * The built-in subjects by name, and `loadSubject`: a built-in name or the path of a user's module.
 *
 * A user module's default export (or its export named `subject`) must be a Subject: a `name` string,
 * a `clip` function and, if given, a `tolerance` of exact / fp32 / bf16. Anything else is refused
 * with an InputError that names the path, the field and the value found.
 */
import { didYouMean } from "../util/did-you-mean.ts";
import { existsSync, readFileSync } from "node:fs";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { InputError } from "../errors.ts";
import type { Subject, ToleranceClass } from "../subject/api.ts";

import reference from "../subject/builtin/reference.ts";
import bucketed from "../subject/builtin/bucketed.ts";
import titan from "../subject/builtin/titan.ts";
import exact from "../subject/builtin/exact.ts";

import hfReplicate from "../subject/known-bad/hf-replicate.ts";
import noPpReduce from "../subject/known-bad/no-pp-reduce.ts";
import replicaTwice from "../subject/known-bad/replica-twice.ts";
import replicaUnscaled from "../subject/known-bad/replica-unscaled.ts";
import tpReplicateSummed from "../subject/known-bad/tp-replicate-summed.ts";
import infAsSum from "../subject/known-bad/inf-as-sum.ts";
import unbucketed from "../subject/known-bad/unbucketed.ts";
import epSkipEmpty from "../subject/known-bad/ep-skip-empty.ts";
import paddingCounted from "../subject/known-bad/padding-counted.ts";
import bf16Norm from "../subject/known-bad/bf16-norm.ts";
import epsPerRank from "../subject/known-bad/eps-per-rank.ts";
import titanMtp from "../subject/builtin/titan-mtp.ts";
import finalizeForgotten from "../subject/known-bad/finalize-forgotten.ts";
import replicaOwnCoef from "../subject/known-bad/replica-own-coef.ts";
import initUnsynced from "../subject/known-bad/init-unsynced.ts";

const CORRECT: readonly Subject[] = [reference, bucketed, titan, exact];
const KNOWN_BAD: readonly Subject[] = [
  hfReplicate,
  noPpReduce,
  replicaTwice,
  replicaUnscaled,
  tpReplicateSummed,
  infAsSum,
  unbucketed,
  epSkipEmpty,
  paddingCounted,
  bf16Norm,
  epsPerRank,
];

/**
 * Optimizer-owned clippers (shape "optimizer": they finalize tied gradients themselves), kept out of
 * the lists above so the clip matrices' sweeps stay as they are: the `finalize` and `train` sections
 * run them (matrix/finalize.ts).
 */
const OPTIMIZER_CORRECT: readonly Subject[] = [titanMtp];
const OPTIMIZER_KNOWN_BAD: readonly Subject[] = [finalizeForgotten, replicaOwnCoef, initUnsynced];
export const OPTIMIZER_SUBJECTS: string[] = OPTIMIZER_CORRECT.map((s) => s.name);
export const OPTIMIZER_KNOWN_BAD_SUBJECTS: string[] = OPTIMIZER_KNOWN_BAD.map((s) => s.name);

/** Correct subjects: each must pass every check under the tolerance it claims. */
export const CORRECT_SUBJECTS: string[] = CORRECT.map((s) => s.name);
/** Known-bad subjects: each models one bug of SPEC §1 and declares the checks that must catch it. */
export const KNOWN_BAD_SUBJECTS: string[] = KNOWN_BAD.map((s) => s.name);

export const BUILTIN_SUBJECTS: Record<string, Subject> = Object.fromEntries(
  [...CORRECT, ...KNOWN_BAD, ...OPTIMIZER_CORRECT, ...OPTIMIZER_KNOWN_BAD].map((s) => [s.name, s]),
);

export const TOLERANCE_CLASSES: readonly ToleranceClass[] = ["exact", "fp32", "fp32-accum", "bf16"];

/**
 * Whether a subject runs outside this process (the PyTorch adapter runs it under torchrun): its
 * cells need no worker thread for isolation, and share one adapter session, so they run in order.
 */
export function isExternalSpec(spec: string): boolean {
  return spec.startsWith("torch:");
}

/** Whether a subject spec names a module file rather than a built-in subject. */
export function isSubjectPath(spec: string): boolean {
  return /^(\.{1,2}[\\/]|\/)/.test(spec) || /\.(ts|js|mjs)$/.test(spec);
}

/** Checks that `value` (what a module exported) is a usable Subject; `where` names it in errors. */
/** The fields of the subject API: what is read of a subject object, once each. */
const SUBJECT_FIELDS = ["name", "description", "tolerance", "catchBy", "shape", "clip", "afterInit", "external"] as const;

/**
 * A subject object read once into a plain record of the API's fields (own or from its class), so that
 * what is checked is what runs: a getter could answer the check one value and the call another, so a
 * field that is an accessor is refused.
 */
function readSubjectOnce(value: object, where: string): Record<(typeof SUBJECT_FIELDS)[number], unknown> {
  const record = {} as Record<(typeof SUBJECT_FIELDS)[number], unknown>;
  for (const key of SUBJECT_FIELDS) {
    let d: PropertyDescriptor | undefined;
    for (let o: object | null = value; o && o !== Object.prototype && !d; o = Object.getPrototypeOf(o) as object | null) d = Object.getOwnPropertyDescriptor(o, key);
    if (d && !("value" in d)) throw new InputError(`${where}: field "${key}" is a getter; a subject's fields must be plain values (each is read once)`);
    record[key] = d?.value;
  }
  return record;
}

export function validateSubject(value: unknown, where: string): Subject {
  if (value === null || typeof value !== "object") {
    throw new InputError(`${where}: a subject must be an object (use defineSubject({...})); got ${describe(value)}`);
  }
  const s = readSubjectOnce(value, where);
  if (typeof s.name !== "string" || s.name.length === 0) {
    throw new InputError(`${where}: field "name" must be a non-empty string; got ${describe(s.name)}`);
  }
  if (typeof s.clip !== "function") {
    throw new InputError(`${where}: field "clip" must be a function (rank, args) => Promise<number>; got ${describe(s.clip)}`);
  }
  if (s.tolerance !== undefined && !TOLERANCE_CLASSES.includes(s.tolerance as ToleranceClass)) {
    throw new InputError(`${where}: field "tolerance" must be one of ${TOLERANCE_CLASSES.join(", ")}; got ${describe(s.tolerance)}`);
  }
  if (s.description !== undefined && typeof s.description !== "string") {
    throw new InputError(`${where}: field "description" must be a string; got ${describe(s.description)}`);
  }
  if (s.catchBy !== undefined && !(Array.isArray(s.catchBy) && s.catchBy.every((c) => typeof c === "string"))) {
    throw new InputError(`${where}: field "catchBy" must be an array of check ids; got ${describe(s.catchBy)}`);
  }
  if (s.shape !== undefined && s.shape !== "clip" && s.shape !== "optimizer") {
    throw new InputError(`${where}: field "shape" must be "clip" or "optimizer"; got ${describe(s.shape)}`);
  }
  if (s.afterInit !== undefined && typeof s.afterInit !== "function") {
    throw new InputError(`${where}: field "afterInit" must be a function (rank, { params }) => Promise<void>; got ${describe(s.afterInit)}`);
  }
  // the record, not the object: methods keep `this` (subjects that are class instances), arrays are copied
  const subject = s as unknown as Subject;
  return Object.freeze({
    name: subject.name,
    description: subject.description ?? "",
    ...(subject.tolerance !== undefined ? { tolerance: subject.tolerance } : {}),
    ...(subject.catchBy !== undefined ? { catchBy: Object.freeze([...subject.catchBy]) } : {}),
    ...(subject.shape ? { shape: subject.shape } : {}),
    clip: subject.clip.bind(value),
    ...(subject.afterInit ? { afterInit: subject.afterInit.bind(value) } : {}),
    ...(subject.external ? { external: subject.external.bind(value) } : {}),
  });
}

/**
 * Why a module did not load, with file, line and column when it is a syntax error: esbuild (tsx) puts
 * "file:line:col: ERROR: ..." in its message; Node's own SyntaxError puts "file:line" atop its stack.
 */
export function describeLoadError(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const lines = err.message.split("\n").map((l) => l.trim()).filter(Boolean);
  const located = lines.find((l) => /:\d+:\d+: ERROR: /.test(l));
  if (located) return `syntax error at ${located.replace(": ERROR: ", ": ")}`;
  if (err.name === "SyntaxError") {
    const at = (err.stack ?? "").split("\n")[0]!;
    const where = /^(file:\/\/\S+?|\/\S+?):(\d+)$/.exec(at.trim());
    return `syntax error at ${where ? `${where[1]!.replace(/^file:\/\//, "")}:${where[2]}` : "an unknown place"}: ${err.message}`;
  }
  return `${err.name === "Error" ? "" : `${err.name}: `}${lines[0] ?? err.message}`;
}

/** "syntax error at FILE:LINE:COL: what", from esbuild's parse of a JavaScript or TypeScript file. */
async function locateSyntaxError(path: string): Promise<string | null> {
  try {
    const { transform } = await import("esbuild");
    await transform(readFileSync(path, "utf8"), { loader: path.endsWith(".ts") ? "ts" : "js", sourcefile: path, format: "esm" });
    return null;
  } catch (err) {
    const e = (err as { errors?: { text: string; location?: { file: string; line: number; column: number } | null }[] }).errors?.[0];
    if (!e?.location) return null;
    return `syntax error at ${e.location.file}:${e.location.line}:${e.location.column + 1}: ${e.text}`;
  }
}

function describe(v: unknown): string {
  if (typeof v === "function") return "a function";
  if (typeof v === "string") return JSON.stringify(v);
  if (v === undefined) return "undefined";
  try {
    return JSON.stringify(v) ?? String(v);
  } catch {
    return String(v);
  }
}

/** The query that gives each rank its own instance of a subject module (and of the modules it imports). */
export const RANK_QUERY = "clip-parity-rank";

/**
 * The URL a subject module is imported from: with a rank, a URL of that rank's own, so that the ranks
 * of one cell share no module state (loader-hooks.mjs carries the query to the modules it imports).
 */
function moduleUrl(path: string, rank: number | undefined): string {
  const url = pathToFileURL(path);
  if (rank !== undefined) url.searchParams.set(RANK_QUERY, String(rank));
  return url.href;
}

/**
 * A built-in subject by name, or a user subject from a module path (relative to the working
 * directory; `.ts` works because the harness runs under tsx/vitest), or `torch:<module>:<function>`: a
 * Python function run by the PyTorch adapter (harness/external/torch/subject.ts).
 */
export async function loadSubject(spec: string, options: { rank?: number } = {}): Promise<Subject> {
  if (typeof spec !== "string" || spec.length === 0) {
    throw new InputError(`subject: expected a built-in name or a module path; got ${describe(spec)}`);
  }
  if (spec.startsWith("torch:")) {
    // A real Python function run by the PyTorch adapter (adapters/torch): loaded only when asked for.
    const { loadTorchSubject } = await import("../external/torch/subject.ts");
    return loadTorchSubject(spec);
  }
  if (!isSubjectPath(spec)) {
    const builtin = Object.hasOwn(BUILTIN_SUBJECTS, spec) ? BUILTIN_SUBJECTS[spec] : undefined;
    if (!builtin) {
      throw new InputError(
        `subject "${spec}" is not a built-in subject (built in: ${Object.keys(BUILTIN_SUBJECTS).join(", ")})${didYouMean(spec, Object.keys(BUILTIN_SUBJECTS))}; ` +
          "a module path must start with ./, ../ or / or end in .ts, .js or .mjs",
      );
    }
    return builtin;
  }
  const path = resolve(process.cwd(), spec);
  if (!existsSync(path)) throw new InputError(`subject module ${spec} (${path}) could not be loaded: no such file`);
  let mod: Record<string, unknown>;
  try {
    mod = (await import(moduleUrl(path, options.rank))) as Record<string, unknown>;
  } catch (err) {
    let why = describeLoadError(err);
    // Node's SyntaxError from an ES module carries no location: esbuild's parse of the same file does.
    if (err instanceof SyntaxError) why = (await locateSyntaxError(path)) ?? why;
    throw new InputError(`subject module ${spec} (${path}) could not be loaded: ${why}`);
  }
  const exported = mod.default ?? mod.subject;
  if (exported === undefined) {
    throw new InputError(`subject module ${spec}: it has no default export and no export named "subject" (exports: ${Object.keys(mod).join(", ") || "none"})`);
  }
  const subject = validateSubject(exported, `subject module ${spec}`);
  // `external` is the PyTorch adapter's hook (torch: subjects): its self-reported memory, collectives and
  // liveness replace the ledger's and the world's. A module's subject runs on the simulated world, counted
  // below its code, or not at all.
  if (subject.external !== undefined) {
    throw new InputError(
      `subject module ${spec}: field "external" is reserved for the registered PyTorch adapter (torch:<module>:<function> subjects); ` +
        "a subject module implements clip (and afterInit) on the simulated world, where the harness counts memory and collectives itself",
    );
  }
  return subject;
}
