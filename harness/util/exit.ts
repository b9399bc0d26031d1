/**
 * Cleanup that must run however the process ends: a normal exit, or SIGINT/SIGTERM (after which the
 * signal is raised again, so the process still ends the way it was asked to). Installed once per `fn`.
 */
const installed = new Set<() => void>();

export function onExitOrSignal(fn: () => void): void {
  if (installed.has(fn)) return;
  installed.add(fn);
  process.on("exit", fn);
  for (const sig of ["SIGINT", "SIGTERM"] as const) {
    const handler = () => {
      fn();
      process.off(sig, handler);
      process.kill(process.pid, sig);
    };
    process.on(sig, handler);
  }
}
