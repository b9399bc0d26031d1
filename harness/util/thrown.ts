/** How a thrown value and a returned value are shown in a check's message: short, whatever they are. */

/** "TypeError: x is not a function (at my-clip.ts:12:7)": the message and the innermost frame outside node. */
export function describeThrown(err: unknown): string {
  if (!(err instanceof Error)) return `a non-Error value was thrown: ${describeValue(err)}`;
  const frame = (err.stack ?? "").split("\n").slice(1).map((l) => l.trim()).find((l) => l.startsWith("at ") && !l.includes("node:"));
  return `${err.name}: ${err.message}${frame ? ` (${withoutRankQuery(frame)})` : ""}`;
}

/** A stack frame of a rank's instance of a subject module, shown with the module's own path. */
export function withoutRankQuery(frame: string): string {
  return frame.replace(/\?clip-parity-rank=\d+/g, "");
}

const MAX_TEXT = 60;

/**
 * A value a subject returned or threw, in at most a line: a 10-million-element array is "an Array of
 * 10,000,000 elements", not 10 million numbers in a message, a JSON file and a report.
 */
export function describeValue(v: unknown): string {
  if (v === null || v === undefined || typeof v === "boolean" || typeof v === "number") return String(v);
  if (typeof v === "bigint") return `the bigint ${clip(String(v))}`;
  if (typeof v === "string") return `the string ${JSON.stringify(clip(v))}`;
  if (typeof v === "symbol" || typeof v === "function") return `a ${typeof v}`;
  try {
    if (Array.isArray(v)) return `an Array of ${v.length.toLocaleString("en-US")} elements`;
    if (ArrayBuffer.isView(v)) return `a ${v.constructor.name} of ${((v as unknown as { length?: number }).length ?? v.byteLength).toLocaleString("en-US")} elements`;
    const keys = Object.keys(v as object);
    return `an object {${clip(keys.slice(0, 5).join(", ") + (keys.length > 5 ? `, ... (${keys.length} keys)` : ""))}}`;
  } catch {
    return "an object that cannot be inspected";
  }
}

function clip(text: string): string {
  return text.length > MAX_TEXT ? `${text.slice(0, MAX_TEXT)}... (${text.length.toLocaleString("en-US")} characters)` : text;
}
