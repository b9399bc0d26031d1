/**
 * Sealing a cell worker before any subject code loads (issue 21): the checks, the result message and
 * the isolation check run in the same thread as the subject, so everything they depend on must be out
 * of the subject's reach. After `sealWorker()`:
 *
 * - the JavaScript intrinsics (Object, Array, Math, JSON, Promise, the typed arrays, iterator and
 *   function prototypes...) and the message port classes are frozen, so a subject cannot make
 *   `Math.abs`, `Array.prototype.every` or `MessagePort.prototype.postMessage` lie to the harness;
 * - the intrinsic globals cannot be replaced and no new global can be added, so two ranks of one cell
 *   cannot meet through `globalThis` (each rank has its own instance of the subject's modules);
 * - every export of the harness modules the worker loaded is frozen (`CHECKS[i].judge`,
 *   `Backend.prototype.opsFor`), so one subject cannot change another's verdict.
 *
 * Assigning to a property that a frozen prototype holds (`this.name = "MyError"` in an Error subclass,
 * `obj.toString = ...`) would throw in strict code (the "override mistake"): for the few names that
 * ordinary code does assign, the prototype's data property becomes an accessor whose setter defines
 * the property on the object assigned to, as SES does.
 */

import { harden, hardenHandedOut, hiddenIntrinsics, INTRINSIC_GLOBALS } from "../util/harden.ts";
import Module, { syncBuiltinESMExports } from "node:module";
import { dirname, join, sep } from "node:path";
import { fileURLToPath } from "node:url";
// @ts-expect-error -- an .mjs module of plain JavaScript (the loader hooks): typed where it is used
import { JUDGE_ONLY as JUDGE_ONLY_FILES, judgeOnlyRefusal as refusal } from "../subject/loader-hooks.mjs";

const JUDGE_ONLY = JUDGE_ONLY_FILES as readonly string[];
const judgeOnlyRefusal = refusal as (specifier: string, path: string) => string;

/** Names ordinary code assigns on its own objects although a prototype holds them. */
const OVERRIDABLE = new Set<PropertyKey>(["constructor", "name", "message", "toString", "valueOf", "toLocaleString", "toJSON", "cause"]);

/** Turns the overridable data properties of a prototype into accessors that assign on the receiver. */
function enableOverrides(proto: object): void {
  for (const key of Reflect.ownKeys(proto)) {
    if (!OVERRIDABLE.has(key)) continue;
    const d = Object.getOwnPropertyDescriptor(proto, key)!;
    if (!("value" in d) || !d.configurable) continue;
    const value: unknown = d.value;
    Object.defineProperty(proto, key, {
      configurable: false,
      enumerable: d.enumerable,
      get() {
        return value;
      },
      set(this: object, v: unknown) {
        if (this === proto) throw new TypeError(`Cannot assign to read only property '${String(key)}' of a sealed prototype`);
        Object.defineProperty(this, key, { value: v, writable: true, enumerable: true, configurable: true });
      },
    });
  }
}

let sealed = false;

/**
 * Freezes the intrinsics, fixes the intrinsic globals and closes globalThis to new properties, then
 * freezes every export of `modules` (the harness's module namespaces). Once per thread.
 */
export function sealWorker(modules: readonly object[]): void {
  if (sealed) return;
  sealed = true;
  const g = globalThis as Record<string, unknown>;
  const roots: unknown[] = [...INTRINSIC_GLOBALS.filter((n) => n in g).map((n) => g[n]), ...hiddenIntrinsics()];
  for (const root of roots) {
    const proto = (root as { prototype?: unknown }).prototype;
    if (typeof root === "function" && proto && typeof proto === "object") enableOverrides(proto);
  }
  enableOverrides(Object.prototype);
  const seen = new Set<unknown>();
  for (const root of roots) harden(root, seen);
  for (const name of INTRINSIC_GLOBALS) {
    const d = Object.getOwnPropertyDescriptor(globalThis, name);
    if (d && d.configurable) Object.defineProperty(globalThis, name, "value" in d ? { writable: false, configurable: false } : { configurable: false });
  }
  Object.preventExtensions(globalThis);
  for (const ns of modules) sealExports(ns, seen);
}

/**
 * Freezes what a harness module exports: functions and classes (with their prototypes), plain objects
 * and arrays, deeply. Instances of other classes (a zod schema that caches lazily) are left as they are:
 * the harness never hands those to a subject.
 */
function sealExports(ns: object, seen: Set<unknown>): void {
  for (const key of Reflect.ownKeys(ns)) {
    const v = (ns as Record<PropertyKey, unknown>)[key];
    if (typeof v === "function" || isPlain(v)) hardenPlain(v, seen);
  }
}

function isPlain(v: unknown): v is object {
  if (typeof v !== "object" || v === null) return false;
  const proto = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === Array.prototype || proto === null;
}

function hardenPlain(value: unknown, seen: Set<unknown>): void {
  if ((typeof value !== "object" && typeof value !== "function") || value === null || seen.has(value)) return;
  if (typeof value === "object" && !isPlain(value)) return;
  seen.add(value);
  for (const key of Reflect.ownKeys(value)) {
    const d = Object.getOwnPropertyDescriptor(value, key)!;
    if ("value" in d) hardenPlain(d.value, seen);
  }
  Object.freeze(value);
  if (typeof value === "function") {
    const proto = (value as { prototype?: unknown }).prototype;
    if (proto && typeof proto === "object" && !seen.has(proto)) {
      seen.add(proto);
      Object.freeze(proto);
    }
  }
}

/**
 * The module loader as a subject's worker holds it (issue 57: both were seen to reach the judge's code).
 * `require` does not pass through the ESM hooks of loader-hooks.mjs, so the judge's modules are refused to
 * any `require` from outside the harness here, at the CommonJS resolver; and `module.register` is refused,
 * since hooks a subject installs run before the harness's and could hide from it which module imports.
 */
export function sealModuleLoading(): void {
  const loader = Module as unknown as { _resolveFilename: (request: string, parent: { filename?: string | null } | undefined, ...rest: unknown[]) => string };
  const resolveFilename = loader._resolveFilename;
  const harness = join(dirname(fileURLToPath(import.meta.url)), "..") + sep;
  Object.defineProperty(loader, "_resolveFilename", {
    value: function (this: unknown, request: string, parent: { filename?: string | null } | undefined, ...rest: unknown[]) {
      const file = resolveFilename.call(this, request, parent, ...rest);
      if (JUDGE_ONLY.includes(file) && !(parent?.filename ?? "").startsWith(harness)) throw new Error(judgeOnlyRefusal(request, file));
      return file;
    },
    writable: false,
    configurable: false,
  });
  Object.defineProperty(Module, "register", {
    value: () => {
      throw new Error("module.register: loader hooks cannot be installed in a subject's worker");
    },
    writable: false,
    configurable: false,
  });
  syncBuiltinESMExports();
}

/**
 * The addon as a worker holds it, after sealWorker: the exports that compute a reference removed (the
 * reference is the judge's, from its own addon instance; gradients/reference.ts kept its kernels), every
 * other export, class and prototype frozen, and `process.dlopen` refused, so that a subject can neither
 * recompute its cell's reference through a second instance of the addon nor rewrite what the next
 * subject in this worker calls. `process` takes no new property: ranks cannot meet through it.
 */
export function sealAddon(addon: object, referenceExports: readonly string[]): void {
  for (const name of referenceExports) delete (addon as Record<string, unknown>)[name];
  hardenHandedOut(addon);
  Object.defineProperty(process, "dlopen", {
    value: () => {
      throw new Error("process.dlopen: loading native code is refused in a subject's worker");
    },
    writable: false,
    configurable: false,
  });
  Object.preventExtensions(process);
}

