// Installs a resolve hook of its own that drops the importing module's URL (where the rank query lives)
// before the harness's hook reads it, then imports the reference.
import { register } from "node:module";
import { subject } from "./_attempt.js";
export default subject("imports-registers-hook", async () => {
  register("data:text/javascript,export async function resolve(s, c, next) { return next(s, { ...c, parentURL: undefined }); }");
  return import(new URL("../../../../harness/gradients/reference.ts", import.meta.url).href);
});
