// Asks the backend for 4 TB: refused by its own op, never taken from the machine.
export default { name: "huge-alloc", async clip(rank) { rank.ops.empty("f32", [1e12]); return 0; } };
