/**
 * Progress on a terminal (one line rewritten in place) or plain lines when not a TTY (CI logs),
 * so long runs show they are alive without flooding a log.
 */
import { escapeControls } from "../harness/results/controls.ts";
import type { RunHooks } from "../harness/run/runner.ts";
import { cellFailed } from "../harness/results/summary.ts";

export function progressHooks(stream: NodeJS.WriteStream): RunHooks {
  const started = performance.now();
  let failed = 0;
  const tty = Boolean(stream.isTTY);
  const line = (done: number, total: number, id: string) => {
    const secs = (performance.now() - started) / 1000;
    const eta = done ? (secs / done) * (total - done) : 0;
    return `[${String(done).padStart(String(total).length)}/${total}] ${failed} failed  ${secs.toFixed(0)}s elapsed, ~${eta.toFixed(0)}s left  ${id}`;
  };
  return {
    onCellEnd(result, _index, total, done) {
      if (cellFailed(result)) failed++;
      if (tty) {
        const text = line(done, total, escapeControls(result.id));
        stream.write(`\r\x1b[2K${text.slice(0, (stream.columns ?? 120) - 1)}`);
        if (done === total) stream.write("\n");
      } else if (done === total || done % Math.max(1, Math.ceil(total / 20)) === 0) {
        stream.write(`${line(done, total, escapeControls(result.id))}\n`);
      }
    },
  };
}
