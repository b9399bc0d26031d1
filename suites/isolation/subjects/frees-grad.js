// Frees a gradient the harness owns: the backend must refuse it in the subject's own call.
export default { name: "frees-grad", async clip(rank, { params }) { for (const p of params) if (p.grad) rank.ops.free(p.grad); return 0; } };
