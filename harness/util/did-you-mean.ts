/**
 * "did you mean" for a mistyped name (a flag, a layout axis, a model, a subject, a regime, a matrix): the known
 * name a prefix or a couple of edits away, so an error can name what the user most likely meant.
 */

/** Edits (insert, delete, replace, swap of neighbours) that turn `a` into `b`. */
export function editDistance(a: string, b: string): number {
  const d = Array.from({ length: a.length + 1 }, (_, i) => Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      d[i]![j] = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d[i]![j] = Math.min(d[i]![j]!, d[i - 2]![j - 2]! + 1);
    }
  }
  return d[a.length]![b.length]!;
}

/** The known name a mistyped one most likely meant: the one it is a prefix of, or the nearest at most 2 edits away (1 for names of 4 or fewer). */
export function nearest(name: string, known: readonly string[]): string | undefined {
  const prefixed = known.filter((k) => name.length >= 3 && k.startsWith(name));
  if (prefixed.length === 1) return prefixed[0];
  const limit = name.length <= 4 ? 1 : 2;
  const scored = known.map((k) => ({ k, d: editDistance(name.toLowerCase(), k.toLowerCase()) })).filter((x) => x.k !== name && x.d <= limit);
  scored.sort((a, b) => a.d - b.d);
  return scored[0]?.k;
}

/** "; did you mean X?" when a known name is near, else "". */
export function didYouMean(name: string, known: readonly string[], quote = '"'): string {
  const near = nearest(name, known);
  return near === undefined ? "" : `; did you mean ${quote}${near}${quote}?`;
}
