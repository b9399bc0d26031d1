#!/usr/bin/env node
// Node 20 cannot import .ts on its own: tsx's loader lets the CLI, and users' .ts subjects, load.
import { register } from "tsx/esm/api";

register();
const { main } = await import("../harness/run/cli.ts");
process.exitCode = await main(process.argv.slice(2));
