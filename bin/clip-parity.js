#!/usr/bin/env node
// Node 20 cannot import .ts on its own: tsx's loader lets the CLI, and users' .ts subjects, load;
// our hooks let a subject anywhere import `clip-parity/...` as an ES module (harness/subject/loader-hooks.mjs).
import { register } from "tsx/esm/api";
import { register as registerHooks } from "node:module";

// `clip-parity ... | head` closes the pipe early: that is not an error worth a stack trace.
for (const stream of [process.stdout, process.stderr]) {
  stream.on("error", (err) => {
    if (err.code === "EPIPE") process.exit(process.exitCode ?? 0);
    throw err;
  });
}

register();
registerHooks("../harness/subject/loader-hooks.mjs", import.meta.url);
const { main } = await import("../cli/main.ts");
process.exitCode = await main(process.argv.slice(2));
