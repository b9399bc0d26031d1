//! Which kernel code runs: [`KernelPath`] (portable, AVX2 + F16C, AVX-512 generator), chosen by
//! argument, never by a global, and `multiversion!`, which compiles a portable kernel a second time
//! for AVX2. Below every kernel module (exact.rs, kernels.rs, gen.rs, optim.rs, reference.rs); it
//! asks simd.rs only whether this CPU runs the SIMD code.

/// Defines `pub fn $name` that runs `$body` compiled with AVX2 when the CPU has it.
macro_rules! multiversion {
    ($(#[$m:meta])* $vis:vis fn $name:ident<$T:ident: Elem>($($arg:ident: $ty:ty),*) -> $ret:ty $body:block) => {
        $(#[$m])*
        $vis fn $name<$T: Elem>($($arg: $ty),*) -> $ret {
            #[inline(always)]
            fn inner<$T: Elem>($($arg: $ty),*) -> $ret $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2")]
                unsafe fn avx2<$T: Elem>($($arg: $ty),*) -> $ret {
                    inner::<$T>($($arg),*)
                }
                if std::is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU supports AVX2 (checked above).
                    return unsafe { avx2::<$T>($($arg),*) };
                }
            }
            inner::<$T>($($arg),*)
        }
    };
}
pub(crate) use multiversion;

/// Which code the hand-written kernels run: the portable Rust code, or the AVX2 (+F16C) kernels
/// of simd.rs, whose generator runs on AVX-512 (64-bit lane multiplies) where the CPU has it. Every
/// path gives the same results (tests compare them); the choice is an argument, never a global, so
/// tests can run the paths side by side. Only `detect` can choose a SIMD path, so a `KernelPath`
/// that says SIMD is proof that this CPU runs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelPath {
    simd: bool,
    /// the generator on AVX-512 (implies simd)
    wide: bool,
}

/// `detect`'s answer, made once.
static DETECTED: std::sync::OnceLock<KernelPath> = std::sync::OnceLock::new();

impl KernelPath {
    /// The portable code (every CPU).
    pub const PORTABLE: KernelPath = KernelPath { simd: false, wide: false };

    /// The fastest path this CPU supports (AVX2 + F16C on x86_64, its generator on AVX-512 F + DQ
    /// when present, else portable), capped by `CLIP_PARITY_SIMD` (see [`KernelPath::cap`]).
    #[inline]
    pub fn detect() -> KernelPath {
        *DETECTED.get_or_init(|| KernelPath::cpu().capped(KernelPath::cap(std::env::var("CLIP_PARITY_SIMD").ok().as_deref())))
    }

    /// The fastest path this CPU supports, whatever `CLIP_PARITY_SIMD` says.
    pub fn cpu() -> KernelPath {
        #[cfg(target_arch = "x86_64")]
        {
            KernelPath { simd: crate::simd::available(), wide: crate::simd::wide_available() }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            KernelPath::PORTABLE
        }
    }

    /// The most that `CLIP_PARITY_SIMD` (read once per process) lets `detect` choose: `portable`,
    /// `avx2` (the AVX2 path on an AVX-512 machine: how a CPU without AVX-512 runs, measured and
    /// tested here) or `avx512`; unset, empty, `auto` or anything else: no cap. It only ever lowers
    /// the path, never raises it above what the CPU has, so it cannot make `detect` unsafe.
    pub fn cap(var: Option<&str>) -> KernelPath {
        match var.map(str::trim) {
            Some("portable") => KernelPath::PORTABLE,
            Some("avx2") => KernelPath { simd: true, wide: false },
            _ => KernelPath { simd: true, wide: true },
        }
    }

    /// This path lowered to at most `cap`.
    pub fn capped(self, cap: KernelPath) -> KernelPath {
        KernelPath { simd: self.simd && cap.simd, wide: self.wide && cap.wide }
    }

    /// The path's name: `portable`, `avx2` or `avx512` (the values `CLIP_PARITY_SIMD` takes).
    pub fn name(self) -> &'static str {
        match (self.simd, self.wide) {
            (false, _) => "portable",
            (true, false) => "avx2",
            (true, true) => "avx512",
        }
    }

    /// This path with the generator on AVX2 (a CPU without AVX-512, or a test of that code here).
    pub fn without_wide(self) -> KernelPath {
        KernelPath { wide: false, ..self }
    }

    /// Whether this path runs the SIMD kernels.
    pub fn is_simd(self) -> bool {
        self.simd
    }

    /// Whether the SIMD generator runs on AVX-512.
    pub fn is_wide(self) -> bool {
        self.wide
    }

    /// The distinct paths this CPU can run, the portable one first: what tests compare (every one,
    /// whatever `CLIP_PARITY_SIMD` says).
    pub fn all_here() -> Vec<KernelPath> {
        let mut paths = vec![KernelPath::PORTABLE];
        for p in [KernelPath::cpu().without_wide(), KernelPath::cpu()] {
            if !paths.contains(&p) {
                paths.push(p);
            }
        }
        paths
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_only_lowers_the_path() {
        let (p, a2, a5) = (KernelPath::PORTABLE, KernelPath { simd: true, wide: false }, KernelPath { simd: true, wide: true });
        for cpu in [p, a2, a5] {
            assert_eq!(cpu.capped(KernelPath::cap(None)), cpu);
            assert_eq!(cpu.capped(KernelPath::cap(Some("auto"))), cpu);
            assert_eq!(cpu.capped(KernelPath::cap(Some("nonsense"))), cpu);
            assert_eq!(cpu.capped(KernelPath::cap(Some("avx512"))), cpu);
            assert_eq!(cpu.capped(KernelPath::cap(Some("portable"))), p);
            assert_eq!(cpu.capped(KernelPath::cap(Some(" avx2"))), if cpu.simd { a2 } else { p });
        }
        assert_eq!([p.name(), a2.name(), a5.name()], ["portable", "avx2", "avx512"]);
        // detect is the CPU's path under the process's cap
        let cap = KernelPath::cap(std::env::var("CLIP_PARITY_SIMD").ok().as_deref());
        assert_eq!(KernelPath::detect(), KernelPath::cpu().capped(cap));
    }
}
