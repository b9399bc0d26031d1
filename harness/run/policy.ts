/**
 * How a matrix runs, decided once for every caller (the command line, `npm test`, the nightly): which
 * backend, which subjects, which cells, and what is refused before anything runs.
 */
import { ClipParityError, InputError } from "../errors.ts";
import { BACKEND_KINDS, type BackendKind } from "../backend/backend.ts";
import { native } from "../backend/native.ts";
import { CORRECT_SUBJECTS } from "../registry/registry.ts";
import { formatLayout, worldSize } from "../layout/layout.ts";
import { cellId, cellsOf, type Cell, type Matrix } from "../cell/cell.ts";
import { selectShard, type Shard } from "./shard.ts";
import { regimeSpec } from "../gradients/regimes.ts";

/** What a run may cost before it is refused (exit 2), each raised by a flag. */
export interface RunLimits {
  /** Cells in one run (a sweep file multiplies quickly). */
  maxCells: number;
  /** Ranks of one cell: every rank is a coroutine with its own plan and tensors. */
  maxWorld: number;
}

export const DEFAULT_LIMITS: RunLimits = { maxCells: 100_000, maxWorld: 4096 };

/** A backend name from a flag or a file; InputError naming `flag` otherwise. */
export function parseBackend(text: string, flag = "--backend"): BackendKind {
  if (!(BACKEND_KINDS as readonly string[]).includes(text)) throw new InputError(`${flag}: "${text}" is not one of ${BACKEND_KINDS.join(", ")}`);
  return text as BackendKind;
}

/**
 * The backend a matrix runs on: the one asked for, else the matrix's own. A cuda matrix on a machine
 * without CUDA is refused (E_NO_CUDA, exit 2) with the command that runs the same cells on the CPU.
 */
export function resolveBackend(matrix: Pick<Matrix, "name" | "backend">, requested: BackendKind | undefined, rerun: string): BackendKind {
  if (requested !== undefined) return requested;
  if (matrix.backend !== "cuda") return "cpu";
  const cuda = native().cudaStatus();
  if (!cuda.present) {
    throw new ClipParityError(
      "E_NO_CUDA",
      `matrix ${matrix.name} needs CUDA, which is not available here (${cuda.message}). ` +
        `To run the same cells on the CPU backend: ${rerun} --backend cpu`,
    );
  }
  return "cuda";
}

export interface Selection {
  subjects?: readonly string[];
  /** Cells whose id contains this text, or matches this expression (`--filter RE`). */
  filter?: string | RegExp;
  /** Cells whose id matches it are left out (`--exclude RE`). */
  exclude?: RegExp;
  /**
   * A user module's name (its defineSubject `name`), by its path: the results files and reports show its cells by
   * that name (`my-clip/tp2/...`), so --filter and --exclude match either id (userSubjectNames).
   */
  names?: Readonly<Record<string, string>>;
  shard?: Shard;
  seed?: number;
  limits?: Partial<RunLimits>;
}

/** The subjects a run uses: the ones asked for, else the matrix's, else the correct built-in ones. */
export function subjectsOf(matrix: Pick<Matrix, "subjects">, requested: readonly string[] | undefined): string[] {
  return [...new Set(requested ?? matrix.subjects ?? CORRECT_SUBJECTS)];
}

/**
 * The cells of a run, in matrix order, after --seed, --shard and --filter; refused (exit 2) when the
 * run would select nothing, more cells than the limit, or a cell wider than the world limit.
 */
export function selectCells(matrix: Matrix, selection: Selection = {}): Cell[] {
  const limits: RunLimits = {
    maxCells: selection.limits?.maxCells ?? DEFAULT_LIMITS.maxCells,
    maxWorld: selection.limits?.maxWorld ?? DEFAULT_LIMITS.maxWorld,
  };
  const subjects = subjectsOf(matrix, selection.subjects);
  const total = matrix.cases.length * subjects.length;
  if (total > limits.maxCells) {
    throw new InputError(
      `matrix ${matrix.name}: ${matrix.cases.length.toLocaleString("en-US")} cases x ${subjects.length} subjects = ` +
        `${total.toLocaleString("en-US")} cells, over the limit of ${limits.maxCells.toLocaleString("en-US")} (raise it with --max-cells N)`,
    );
  }
  let cells = cellsOf(matrix, subjects);
  if (selection.seed !== undefined) cells = cells.map((c) => ({ ...c, seed: selection.seed! }));
  cells = selectShard(cells, selection.shard);
  const { filter, exclude, names = {} } = selection;
  // every id a cell is shown by: its path-form id, and for a user module its name-form id
  const ids = (c: Cell) => (Object.hasOwn(names, c.subject) ? [cellId(c), cellId({ ...c, subject: names[c.subject]! })] : [cellId(c)]);
  if (filter) cells = cells.filter((c) => ids(c).some((id) => (typeof filter === "string" ? id.includes(filter) : filter.test(id))));
  if (exclude) cells = cells.filter((c) => !ids(c).some((id) => exclude.test(id)));
  if (cells.length === 0) {
    const why =
      matrix.cases.length === 0
        ? `matrix ${matrix.name} has no cases`
        : filter || exclude
          ? `no cell id ${[filter && (typeof filter === "string" ? `contains "${filter}"` : `matches ${filter}`), exclude && `is left by --exclude ${exclude}`].filter(Boolean).join(" and ")}`
          : "the shard holds no cell";
    throw new InputError(`nothing to run: ${why} (a run that checks nothing must not pass)`);
  }
  for (const c of cells) {
    assertWorld(c, limits.maxWorld, "--max-world");
    regimeSpec(c.regime, c.dtype); // a regime its dtype cannot hold (tiny in f16) is refused before anything runs
  }
  return cells;
}

/** Refuses a cell whose world is wider than `maxWorld` ranks before anything is allocated. */
export function assertWorld(c: Pick<Cell, "layout">, maxWorld: number, flag: string): void {
  const world = worldSize(c.layout);
  if (world > maxWorld) {
    throw new InputError(`layout ${formatLayout(c.layout)} has ${world.toLocaleString("en-US")} ranks, over the limit of ${maxWorld.toLocaleString("en-US")} for a run (raise it with ${flag} N)`);
  }
}
