// Blocks at import: a harness that imports it in its own thread never gets it back.
for (;;) {}
export default { name: "top-level-loop", async clip() { return 0; } };
