/** Builds (or finds) the CPU emulation library of the CUDA kernels; returns its absolute path. */
export function buildCudaEmu(): string;
