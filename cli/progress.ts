/**
 * Progress of a run on stderr: one line rewritten in place on a terminal; where stderr is not a terminal (a CI
 * log, a pipe), a plain line every PLAIN_EVERY_MS of the run and at its end (`--progress`: also every 5% of
 * the cells), so that a log shows the run alive from its first minute; `--quiet` turns it off.
 *
 * The time left is estimated from what the cells finished so far cost, not from how many there are: cells
 * differ by orders of magnitude (a 1-rank llama3-debug cell against a 32-rank deepseek-v3-debug one), so a
 * count-based estimate first overshoots and then sits at a few seconds while the big cells run. Each cell
 * is weighed by the elements its ranks generate (the model's parameters times the ranks), and the time
 * left is the time per unit weight so far times the weight left.
 */
import { escapeControls } from "../harness/util/controls.ts";
import type { RunHooks } from "../harness/run/runner.ts";
import { cellFailed } from "../harness/results/summary.ts";
import { worldSize } from "../harness/layout/layout.ts";
import { getModel } from "../harness/model/models.ts";
import { isExternalSpec } from "../harness/registry/registry.ts";
import type { Cell } from "../harness/cell/cell.ts";

/** What a cell is expected to cost, relative to the others of its run. */
export function cellWeight(c: Pick<Cell, "layout" | "model">): number {
  let params = 1;
  try {
    params = getModel(c.model).totalParams;
  } catch {
    // a model the run will refuse anyway: weigh it as the smallest
  }
  return params * worldSize(c.layout);
}

/** Time left from the cost of the cells done so far: elapsed time per unit weight done, times the weight left. */
export class CostEstimate {
  private readonly weights: number[];
  private readonly total: number;
  private doneWeight = 0;

  constructor(cells: readonly Pick<Cell, "layout" | "model">[]) {
    this.weights = cells.map(cellWeight);
    this.total = this.weights.reduce((a, b) => a + b, 0);
  }

  cellDone(index: number): void {
    this.doneWeight += this.weights[index] ?? 0;
  }

  /** Seconds left, or undefined before anything has finished (nothing measured yet). */
  secondsLeft(elapsedSeconds: number): number | undefined {
    if (this.doneWeight <= 0) return undefined;
    return (elapsedSeconds * (this.total - this.doneWeight)) / this.doneWeight;
  }
}

/** Where stderr is not a terminal: at most one progress line this often. */
export const PLAIN_EVERY_MS = 10_000;

export interface ProgressOptions {
  /** The run's cells in run order, to weigh them (default: those the run starts with, RunStartInfo.cells). */
  cells?: readonly Pick<Cell, "layout" | "model" | "subject">[];
  /** Where the stream is not a terminal, a line every 5% of the cells as well (`--progress`). */
  force?: boolean;
  now?: () => number;
}

/** Progress hooks for a run on `stream`. */
export function progressHooks(stream: NodeJS.WriteStream, options: ProgressOptions): RunHooks {
  const tty = Boolean(stream.isTTY);
  const now = options.now ?? (() => performance.now());
  const started = now();
  let lastPlain = started;
  let estimate = new CostEstimate(options.cells ?? []);
  let failed = 0;
  const show = (text: string, final = false) => {
    if (tty) stream.write(`\r\x1b[2K${text.slice(0, (stream.columns ?? 120) - 1)}${final ? "\n" : ""}`);
    else stream.write(`${text}\n`);
  };
  const line = (done: number, total: number, id: string) => {
    const secs = (now() - started) / 1000;
    const left = estimate.secondsLeft(secs);
    return `[${String(done).padStart(String(total).length)}/${total}] ${failed} failed  ${secs.toFixed(0)}s elapsed, ${left === undefined ? "estimating" : `~${left.toFixed(0)}s left`}  ${id}`;
  };
  return {
    onRunStart(info) {
      if (!options.cells) estimate = new CostEstimate(info.cells);
      show(`running ${info.total} cells of ${info.matrix} on ${info.backend}...`, !tty);
    },
    onCellStart(cell) {
      // torchrun's start-up takes 15-20 s before a torch cell reports anything: say what is happening
      if (isExternalSpec(cell.subject)) show(`starting torchrun for ${escapeControls(cell.subject)} on ${worldSize(cell.layout)} ranks (about 15-20 s of start-up)...`, !tty);
    },
    onCellEnd(result, index, total, done) {
      if (cellFailed(result)) failed++;
      estimate.cellDone(index);
      const text = line(done, total, escapeControls(result.id));
      if (tty) show(text, done === total);
      else if (done === total || now() - lastPlain >= PLAIN_EVERY_MS || (options.force && done % Math.max(1, Math.ceil(total / 20)) === 0)) {
        lastPlain = now();
        show(text);
      }
    },
  };
}
