/**
 * Deep freeze for what the harness hands to code it does not trust: a subject that writes into a
 * view's nested arrays (`p.block.len[0] = 0`) must get a TypeError in its own stack, not corrupt the
 * plan the checks read afterwards.
 */
export function deepFreeze<T>(value: T): T {
  if (value === null || typeof value !== "object" || Object.isFrozen(value)) return value;
  Object.freeze(value);
  for (const key of Object.keys(value as object)) deepFreeze((value as Record<string, unknown>)[key]);
  return value;
}
