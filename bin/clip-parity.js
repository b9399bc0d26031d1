#!/usr/bin/env node
// Node 20 cannot import .ts on its own: tsx's loader lets the CLI, and users' .ts subjects, load.
import { register } from "tsx/esm/api";

// `clip-parity ... | head` closes the pipe early: that is not an error worth a stack trace.
for (const stream of [process.stdout, process.stderr]) {
  stream.on("error", (err) => {
    if (err.code === "EPIPE") process.exit(process.exitCode ?? 0);
    throw err;
  });
}

register();
const { main } = await import("../cli/main.ts");
process.exitCode = await main(process.argv.slice(2));
