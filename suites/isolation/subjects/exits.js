// Ends the process as soon as it runs: a run must not read as a pass (exit 0) because of it.
export default { name: "exits", async clip() { process.exit(0); } };
