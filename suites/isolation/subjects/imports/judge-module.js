import { subject } from "./_attempt.js";
export default subject("imports-judge-module", () => import("clip-parity/harness/judge/judge.ts"));
