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

impl KernelPath {
    /// The portable code (every CPU).
    pub const PORTABLE: KernelPath = KernelPath { simd: false, wide: false };

    /// The fastest path this CPU supports (AVX2 + F16C on x86_64, its generator on AVX-512 F + DQ
    /// when present, else portable).
    #[inline]
    pub fn detect() -> KernelPath {
        #[cfg(target_arch = "x86_64")]
        {
            KernelPath { simd: crate::simd::available(), wide: crate::simd::wide_available() }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            KernelPath::PORTABLE
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

    /// The distinct paths this CPU can run, the portable one first: what tests compare.
    pub fn all_here() -> Vec<KernelPath> {
        let mut paths = vec![KernelPath::PORTABLE];
        for p in [KernelPath::detect().without_wide(), KernelPath::detect()] {
            if !paths.contains(&p) {
                paths.push(p);
            }
        }
        paths
    }
}
