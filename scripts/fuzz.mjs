#!/usr/bin/env node
// `npm run fuzz -- [--runs N] [--seed S|random] [--subject NAME]... [--self-test] [--replay FILE]`:
// property-based fuzzing of placement buckets (harness/fuzz). tsx's loader lets Node 20 import .ts.
import { register } from "tsx/esm/api";

for (const stream of [process.stdout, process.stderr]) {
  stream.on("error", (err) => {
    if (err.code === "EPIPE") process.exit(process.exitCode ?? 0);
    throw err;
  });
}

register();
const { main } = await import("../harness/fuzz/cli.ts");
process.exitCode = await main(process.argv.slice(2));
