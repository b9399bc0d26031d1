import { subject } from "./_attempt.js";
export default subject("imports-dynamic-relative", () => import("../../../../harness/gradients/reference.ts"));
