// Blocks its thread in clip: the world's own timer (on the same event loop) can never fire.
export default { name: "busy-loop", async clip() { for (;;) {} } };
