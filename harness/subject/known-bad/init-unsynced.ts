/**
 * `init-unsynced`: `titan-mtp` without the synchronization of tied copies after initialisation. Its
 * clip is correct, so every clip check passes; but with per-stage seeding (a PP trainer seeds each
 * stage differently) the MTP replica starts from other values than the canonical embedding, and the
 * copies of one weight train apart. Caught by the train check (`train.parity`), never by a clip cell.
 */
import { defineSubject } from "../api.ts";
import { exactPowerSum, finishClip } from "../common.ts";
import { finalizeTied } from "../optimizer.ts";

export default defineSubject({
  name: "init-unsynced",
  description: "optimizer-owned clipper whose trainer never syncs the tied copies after per-stage init",
  tolerance: "exact",
  shape: "optimizer",
  catchBy: ["train.parity"],
  // BUG: no afterInit: the tied copies keep their per-stage initial values
  async clip(rank, args) {
    await finalizeTied(rank, args.params);
    const { total } = await exactPowerSum(rank, args.logical, args.normType);
    return finishClip(rank, args, total); // one coefficient on every copy: logical and replicas
  },
});
