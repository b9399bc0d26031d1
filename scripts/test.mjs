#!/usr/bin/env node
// `npm test [-- --matrix NAME|FILE] [--backend B] [--golden MODE] [--report LIST] [--out DIR] [vitest args...]`: cli/test.ts.
import { register } from "tsx/esm/api";

register();
const { testMain } = await import("../cli/test.ts");
process.exitCode = await testMain(process.argv.slice(2));
