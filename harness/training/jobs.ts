/**
 * The train and resume cases as jobs of the sandbox's pool: each case in a worker like a cell (its wall
 * clock, heap limit and isolation fault), for the `train` and `resume` commands and the suites.
 */
import { ownScratch, releaseScratch } from "../util/scratch.ts";
import { jobKind, type JobHandlers, type JobTools } from "../execute/job.ts";
import { DEFAULT_TIMEOUT_MS, runJobs, type Job } from "../sandbox/pool.ts";
import { isolatedOutcome, type Isolated, type IsolatedOptions } from "../sandbox/isolated.ts";
import { runResume, type ResumeCell, type ResumeResult } from "./resume.ts";
import { runTrain, type TrainCell, type TrainResult } from "./train-parity.ts";

/** A train job: the cell, and the limit of one subject phase the world applies (the pool's is this plus a grace). */
export interface TrainJobInput {
  cell: TrainCell;
  timeoutMs: number;
}

/** A resume job: the cell, where its checkpoint goes, and the phase limit as for a train job. */
export interface ResumeJobInput {
  cell: ResumeCell;
  dir?: string;
  fromExisting?: boolean;
  scratchDir?: string;
  timeoutMs: number;
}

/** Each step runs the clip once per layout; the initial sync and the comparisons take a few more phases. */
function trainDeadline(c: TrainCell, timeoutMs: number): number {
  return timeoutMs * (c.steps + 2) * Math.max(1, c.layouts.length);
}

export async function trainIsolated(cells: readonly TrainCell[], options: IsolatedOptions = {}): Promise<Isolated<TrainResult>[]> {
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const jobs: Job[] = cells.map((cell, index) => ({ index, kind: TRAIN_JOB.name, module: TRAIN_JOB.module, input: { cell, timeoutMs } satisfies TrainJobInput, deadlineMs: trainDeadline(cell, timeoutMs) }));
  return (await runJobs(jobs, { timeoutMs, heapMb: options.heapMb, workers: options.workers })).map((o) => isolatedOutcome<TrainResult>(o));
}

export async function resumeIsolated(
  inputs: readonly { cell: ResumeCell; dir?: string; fromExisting?: boolean }[],
  options: IsolatedOptions = {},
): Promise<Isolated<ResumeResult>[]> {
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  // A checkpoint that is not kept goes to a scratch folder this thread owns, so that it is removed
  // whatever the job's end: a subject that exits or hangs after the save leaves nothing behind.
  const scratch = new Map<number, string>();
  try {
    // the uninterrupted run, the run to the checkpoint and the resumed run: about three trainings
    const jobs: Job[] = inputs.map((input, index) => {
      if (!input.dir) scratch.set(index, ownScratch("clip-parity-resume-"));
      return { index, kind: RESUME_JOB.name, module: RESUME_JOB.module, input: { ...input, scratchDir: scratch.get(index), timeoutMs } satisfies ResumeJobInput, deadlineMs: timeoutMs * (input.cell.steps + 2) * 3 };
    });
    return (
      await runJobs(jobs, {
        timeoutMs,
        heapMb: options.heapMb,
        workers: options.workers,
        onOutcome: (job) => {
          const dir = scratch.get(job.index);
          if (dir === undefined) return;
          scratch.delete(job.index);
          releaseScratch(dir);
        },
      })
    ).map((o) => isolatedOutcome<ResumeResult>(o));
  } finally {
    // the jobs that never reached an outcome (the run threw)
    for (const dir of scratch.values()) releaseScratch(dir);
  }
}

export const jobs = {
  train: async ({ cell, timeoutMs }: TrainJobInput, tools: JobTools) => runTrain(cell, { subject: await tools.subjectFor(cell.subject), timeoutMs }),
  resume: async (input: ResumeJobInput, tools: JobTools) =>
    runResume(input.cell, {
      subject: await tools.subjectFor(input.cell.subject),
      dir: input.dir,
      fromExisting: input.fromExisting,
      scratchDir: input.scratchDir,
      timeoutMs: input.timeoutMs,
    }),
} satisfies JobHandlers;

const TRAIN_JOB = jobKind("train", import.meta.url);
const RESUME_JOB = jobKind("resume", import.meta.url);
