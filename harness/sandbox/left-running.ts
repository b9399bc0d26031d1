/**
 * What a subject left running when its job ended: live handles (Timeout, Immediate, FSReqCallback...) beyond
 * those before the job. Node counts an Immediate as active until the whole batch of immediates it ran in has
 * been processed, so a count taken inside that batch sees one queued behind ours that is about to run within
 * the job: the count is taken one batch later. A subject's chain of immediates (each scheduling the next) is
 * still pending then, and is reported.
 */

export type Snapshot = Map<string, number>;

/** Live handles by kind; `active` is process.getActiveResourcesInfo, bound before any subject code loads. */
export function handles(active: () => string[]): Snapshot {
  const m = new Map<string, number>();
  for (const kind of active()) m.set(kind, (m.get(kind) ?? 0) + 1);
  return m;
}

/** "2 Timeout", "1 Immediate": what is live now beyond `before`. */
export function leftSince(before: Snapshot, now: Snapshot): string[] {
  const out: string[] = [];
  for (const [kind, n] of now) if (n > (before.get(kind) ?? 0)) out.push(`${n - (before.get(kind) ?? 0)} ${kind}`);
  return out;
}

/**
 * Waits until the job's own immediates have run (a rejection nobody awaited is reported after the microtasks
 * drain; an immediate queued behind ours runs in our batch) and returns what is left running beyond `before`.
 * `immediate` and `active` are the real setImmediate and getActiveResourcesInfo, bound before subject code loads.
 */
export async function leftRunning(before: Snapshot, immediate: (cb: () => void) => unknown, active: () => string[]): Promise<string[]> {
  await new Promise<void>((r) => immediate(r));
  await new Promise<void>((r) => immediate(r)); // the next batch: the previous one's count has settled
  return leftSince(before, handles(active));
}
