//! Writes native/core/src/cuda/kernels.ptx, the PTX shipped as the fallback when a machine has a
//! CUDA driver but no NVRTC: compute_80 PTX of kernels.cu, made by NVRTC 12.0 so that its PTX ISA
//! (8.0) is compiled by every driver from CUDA 12.0 on. Run through `npm run cuda:ptx`
//! (scripts/cuda-ptx.sh installs NVRTC 12.0 from PyPI into .nvrtc/12.0 and points
//! CLIP_PARITY_NVRTC at it). `--any-nvrtc` accepts another NVRTC version (its PTX then needs a
//! driver at least as new as that NVRTC).

use clip_parity_core::cuda::{kernels, nvrtc};

fn main() {
    let any = std::env::args().any(|a| a == "--any-nvrtc");
    let nv = nvrtc::get().unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2)
    });
    if nv.version != (12, 0) && !any {
        eprintln!(
            "NVRTC {}.{} ({}) is not 12.0: the shipped PTX is made by NVRTC 12.0 (PTX ISA 8.0); \
             use scripts/cuda-ptx.sh, or pass --any-nvrtc",
            nv.version.0, nv.version.1, nv.path
        );
        std::process::exit(2);
    }
    let arch = "compute_80";
    let ptx = nv.compile(kernels::SOURCE, "kernels.cu", arch, nvrtc::Output::Ptx).unwrap_or_else(|e| {
        eprintln!("{}", e.0);
        std::process::exit(1)
    });
    let text = String::from_utf8_lossy(&ptx).trim_end_matches('\0').to_string();
    let out = format!(
        "{}\n// made by NVRTC {}.{} for {arch} with {}\n{text}",
        kernels::ptx_header(),
        nv.version.0,
        nv.version.1,
        nvrtc::options(arch)[1..].join(" ")
    );
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/cuda/kernels.ptx");
    std::fs::write(path, out).unwrap_or_else(|e| {
        eprintln!("{path}: {e}");
        std::process::exit(1)
    });
    println!("wrote {path} ({} kernels, {} bytes)", kernels::KERNELS.len(), std::fs::metadata(path).map(|m| m.len()).unwrap_or(0));
}
