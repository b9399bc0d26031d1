/**
 * A checkpoint that cannot be resumed from: refused before any tensor is changed, with the file and
 * the problem named. Code "E_CHECKPOINT" (exit status 2, bad input); `problem` is a stable tag.
 */
import { ClipParityError } from "../errors.ts";

export const CHECKPOINT_PROBLEMS = [
  /** index.json absent, unreadable, not JSON, or not the schema */
  "bad-index",
  /** a shard file listed in index.json is not on disk */
  "missing-shard",
  /** a shard file is shorter than index.json records */
  "truncated",
  /** a shard file is longer than index.json records */
  "size-mismatch",
  /** a shard's safetensors header is invalid (offsets, dtypes, shapes) or disagrees with index.json */
  "bad-header",
  /** a shard's sha256 differs from index.json */
  "checksum",
  /** the chunks of a tensor do not cover it exactly once */
  "missing-chunk",
  /** written for another model (name or a tensor's shape) */
  "model-mismatch",
  /** written for another gradient dtype */
  "dtype-mismatch",
  /** written from another layout, step or seed than the one asked for */
  "run-mismatch",
] as const;
export type CheckpointProblem = (typeof CHECKPOINT_PROBLEMS)[number];

export class CheckpointError extends ClipParityError {
  readonly problem: CheckpointProblem;
  /** The file at fault (a shard, index.json, or the directory). */
  readonly file: string;
  constructor(problem: CheckpointProblem, file: string, message: string) {
    super("E_CHECKPOINT", `checkpoint refused (${problem}): ${file}: ${message}`);
    this.problem = problem;
    this.file = file;
  }
}
