/** The six layout sizes as a zod shape, for every file format that stores a layout as an object. */
import { z } from "zod";

const size = z.number().int().positive();

export const layoutFields = { pp: size, dp_replicate: size, dp_shard: size, cp: size, tp: size, ep: size };
