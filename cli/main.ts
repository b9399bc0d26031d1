/**
 * The clip-parity command line: one module per command, each declaring its flags once (cli/args.ts),
 * all running through the library (harness/run). Exit status: 0 when every check passed, 1 when a
 * check failed, 2 for bad input, with a message naming the flag or file, the value and what is allowed.
 */
import { terminalText } from "../harness/util/controls.ts";
import { ClipParityError, InputError } from "../harness/errors.ts";
import { EXIT_STATUS, helpText, usageLine, type CommandSpec } from "./args.ts";
import { clipParityVersion } from "../harness/run/golden.ts";
import * as runCmd from "./run.ts";
import * as cellCmd from "./cell.ts";
import * as planCmd from "./plan.ts";
import * as manifestCmd from "./manifest.ts";
import * as listCmd from "./list.ts";
import * as gateCmd from "./gate.ts";
import * as mergeCmd from "./merge.ts";
import * as resumeCmd from "./resume.ts";
import * as fuzzCmd from "./fuzz.ts";
import * as exportCmd from "./export.ts";
import * as trainCmd from "./train.ts";
import * as historyCmd from "./history.ts";
import * as bisectCmd from "./bisect.ts";

export interface Command {
  spec: CommandSpec;
  run(argv: string[]): Promise<number>;
}

export const COMMANDS: readonly Command[] = [
  runCmd,
  cellCmd,
  planCmd,
  manifestCmd,
  listCmd,
  gateCmd,
  mergeCmd.merge,
  mergeCmd.report,
  resumeCmd,
  trainCmd,
  fuzzCmd,
  exportCmd,
  historyCmd,
  bisectCmd,
];

export function usage(): string {
  const lines = COMMANDS.map((c) => `  ${c.spec.name.padEnd(9)} ${usageLine(c.spec).slice(c.spec.name.length + 1)}`);
  return `usage: clip-parity <command> [options]   (clip-parity <command> --help for each; clip-parity --version)\n\ncommands:\n${lines.join("\n")}\n\n${EXIT_STATUS}`;
}

export async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  try {
    if (name === "--version" || name === "-V") {
      process.stdout.write(`clip-parity ${clipParityVersion()}\n`);
      return 0;
    }
    if (name === undefined || name === "help" || name === "--help" || name === "-h") {
      process.stdout.write(`${usage()}\n`);
      return name === undefined ? 2 : 0;
    }
    const command = COMMANDS.find((c) => c.spec.name === name);
    if (!command) throw new InputError(`unknown command "${name}"; one of ${COMMANDS.map((c) => c.spec.name).join(", ")}\n${usage()}`);
    if (rest.includes("--help") || rest.includes("-h")) {
      process.stdout.write(helpText(command.spec));
      return 0;
    }
    return await command.run(rest);
  } catch (err) {
    if (err instanceof ClipParityError) {
      process.stderr.write(`clip-parity: ${terminalText(err.message)}\n`);
      return err.exitCode;
    }
    throw err;
  }
}
