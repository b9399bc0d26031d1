/**
 * Who holds the subject to its wall-clock limit: the worker registers the one watcher (pool.ts enforces
 * the limit from outside), and every place that runs subject code (World.run, an external subject's
 * cell) says when that code starts and stops. Registered once, before the realm is sealed: a subject
 * cannot swap it for one that never reports.
 */
let watcher: ((running: boolean) => void) | null = null;

export function watchSubject(fn: (running: boolean) => void): void {
  if (watcher) throw new Error("internal: the subject watcher is registered once per thread");
  watcher = fn;
}

/** Subject code starts (true) or stops (false) running on this thread. */
export function subjectRunning(running: boolean): void {
  watcher?.(running);
}
