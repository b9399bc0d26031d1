// Never yields to the event loop either: every turn is a microtask.
export default { name: "microtask-loop", async clip() { for (;;) await null; } };
