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

/** Globals that are the language's or the runtime's own objects: frozen with their prototypes. */
const INTRINSIC_GLOBALS = [
  "Object", "Function", "Array", "Number", "Boolean", "String", "Symbol", "BigInt", "Date", "RegExp", "Promise",
  "Error", "AggregateError", "EvalError", "RangeError", "ReferenceError", "SyntaxError", "TypeError", "URIError",
  "JSON", "Math", "Reflect", "Proxy", "Intl", "Atomics",
  "ArrayBuffer", "SharedArrayBuffer", "DataView",
  "Int8Array", "Uint8Array", "Uint8ClampedArray", "Int16Array", "Uint16Array", "Int32Array", "Uint32Array",
  "Float32Array", "Float64Array", "BigInt64Array", "BigUint64Array",
  "Map", "Set", "WeakMap", "WeakSet", "WeakRef", "FinalizationRegistry",
  "parseInt", "parseFloat", "isNaN", "isFinite", "encodeURI", "encodeURIComponent", "decodeURI", "decodeURIComponent",
  "MessagePort", "MessageChannel", "EventTarget", "Event", "structuredClone", "queueMicrotask",
  "setTimeout", "clearTimeout", "setInterval", "clearInterval", "setImmediate", "clearImmediate",
  "TextEncoder", "TextDecoder", "URL", "URLSearchParams", "AbortController", "AbortSignal",
] as const;

/** Names ordinary code assigns on its own objects although a prototype holds them. */
const OVERRIDABLE = new Set<PropertyKey>(["constructor", "name", "message", "toString", "valueOf", "toLocaleString", "toJSON", "cause"]);

/**
 * Error's stack hooks stay writable: V8 and source-map support read `Error.prepareStackTrace` and
 * `Error.stackTraceLimit`, and Node sets the limit around internal errors. Neither can change a verdict.
 */
const ERROR_HOOKS = new Set<PropertyKey>(["prepareStackTrace", "stackTraceLimit", "captureStackTrace"]);

/** Objects the language creates but no global names: found through the values that have them. */
function hiddenIntrinsics(): unknown[] {
  const proto = Object.getPrototypeOf;
  async function* asyncGen() {}
  function* gen() {}
  return [
    proto(Uint8Array), // %TypedArray%
    proto([][Symbol.iterator]()),
    proto(proto([][Symbol.iterator]())), // %IteratorPrototype%
    proto(new Map()[Symbol.iterator]()),
    proto(new Set()[Symbol.iterator]()),
    proto(""[Symbol.iterator]()),
    proto(/x/[Symbol.matchAll]("")),
    proto(gen),
    proto(gen()),
    proto(asyncGen),
    proto(asyncGen()),
    proto(proto(proto(asyncGen()))), // %AsyncIteratorPrototype%
    proto(async () => {}),
  ];
}

/** Freezes `value`, everything it holds and its prototype chain (what SES calls harden). */
export function harden(value: unknown, seen = new Set<unknown>()): void {
  if ((typeof value !== "object" && typeof value !== "function") || value === null || seen.has(value)) return;
  seen.add(value);
  const isErrorCtor = value === Error;
  for (const key of Reflect.ownKeys(value)) {
    const d = Object.getOwnPropertyDescriptor(value, key)!;
    if (isErrorCtor && ERROR_HOOKS.has(key)) continue;
    if ("value" in d) harden(d.value, seen);
    else {
      harden(d.get, seen);
      harden(d.set, seen);
    }
  }
  if (isErrorCtor) {
    // frozen but for the stack hooks: every other property fixed, no new one can be added but those
    for (const key of Reflect.ownKeys(value)) {
      if (ERROR_HOOKS.has(key)) continue;
      const d = Object.getOwnPropertyDescriptor(value, key)!;
      Object.defineProperty(value, key, "value" in d ? { writable: false, configurable: false } : { configurable: false });
    }
  } else {
    Object.freeze(value);
  }
  harden(Object.getPrototypeOf(value), seen);
}

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
