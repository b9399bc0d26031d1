// Starts a promise that rejects and that nobody awaits.
export default {
  name: "unhandled",
  async clip() {
    Promise.reject(new Error("nobody awaited this"));
    await new Promise((r) => setTimeout(r, 20));
    return 0;
  },
};
