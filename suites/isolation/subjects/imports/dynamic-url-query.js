import { subject } from "./_attempt.js";
export default subject("imports-dynamic-url-query", () => import(new URL("../../../../harness/gradients/reference.ts?v=2#h", import.meta.url).href));
