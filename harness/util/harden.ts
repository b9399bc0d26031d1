/**
 * Deep freezing, as SES calls it `harden`: an object, everything it holds and its prototype chain. The
 * worker's seal hardens the intrinsics (sandbox/seal.ts) and every object the harness hands a subject
 * (its rank context, its clip's arguments, the addon's exports, the world's groups), so that a subject
 * can rewrite nothing another subject, another rank or the harness reads after it.
 */

/**
 * Error's stack hooks stay writable: V8 and source-map support read `Error.prepareStackTrace` and
 * `Error.stackTraceLimit`, and Node sets the limit around internal errors. Neither can change a verdict.
 */
const ERROR_HOOKS = new Set<PropertyKey>(["prepareStackTrace", "stackTraceLimit", "captureStackTrace"]);

/** Globals that are the language's or the runtime's own objects: frozen with their prototypes. */
export const INTRINSIC_GLOBALS = [
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

/** Objects the language creates but no global names: found through the values that have them. */
export function hiddenIntrinsics(): unknown[] {
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

/** Objects hardened before: each is walked once per thread (a cell hands the same ops and plans out again). */
const hardened = new WeakSet<object>();

let intrinsics: WeakSet<object> | undefined;

/** The realm's own objects (the intrinsic globals, their prototypes, the hidden intrinsics). */
function isIntrinsic(value: object): boolean {
  if (!intrinsics) {
    intrinsics = new WeakSet();
    const g = globalThis as Record<string, unknown>;
    for (const root of [...INTRINSIC_GLOBALS.filter((n) => n in g).map((n) => g[n]), ...hiddenIntrinsics()]) {
      if ((typeof root !== "object" && typeof root !== "function") || root === null) continue;
      intrinsics.add(root);
      const proto = (root as { prototype?: unknown }).prototype;
      if (proto && typeof proto === "object") intrinsics.add(proto);
    }
  }
  return intrinsics.has(value);
}

/**
 * Freezes what the harness hands a subject: the object, everything it holds and its prototypes, up to
 * the realm's intrinsics (a worker's seal froze those already; in the harness's own thread, where a cell
 * can run inline, they stay as they are). The native backend's tensors are handles (frozen ids), never
 * typed arrays.
 */
export function hardenHandedOut<T>(value: T): T {
  return harden(value, new Set(), stopsHardening);
}

/** The intrinsics, and typed arrays (which cannot be frozen with elements: a test backend's tensors hold them). */
function stopsHardening(value: object): boolean {
  return isIntrinsic(value) || ArrayBuffer.isView(value);
}

/** Freezes `value`, everything it holds and its prototype chain (what SES calls harden), stopping at `stop`. */
export function harden<T>(value: T, seen = new Set<unknown>(), stop: (o: object) => boolean = () => false): T {
  if ((typeof value !== "object" && typeof value !== "function") || value === null || seen.has(value) || hardened.has(value) || stop(value)) return value;
  seen.add(value);
  const isErrorCtor = (value as unknown) === Error;
  for (const key of Reflect.ownKeys(value)) {
    const d = Object.getOwnPropertyDescriptor(value, key)!;
    if (isErrorCtor && ERROR_HOOKS.has(key)) continue;
    if ("value" in d) harden(d.value, seen, stop);
    else {
      harden(d.get, seen, stop);
      harden(d.set, seen, stop);
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
  harden(Object.getPrototypeOf(value), seen, stop);
  hardened.add(value);
  return value;
}
