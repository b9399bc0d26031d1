//! The scalar model of the SIMD generators' lane loop (genlanes/model.rs) against the generator's
//! definition (SPEC section 5: `genq::q`, and the portable `GenSpec::fill_range`), bit for bit, on
//! every machine: a CPU without AVX-512 (or without AVX2, or not x86-64) never runs simd.rs's
//! `GenQ16` (or `GenQ8`), but runs this model of their per-lane tables and boundaries. Where the CPU
//! runs a SIMD path, the same tests check that path against the model too. Each deliberate
//! weakening of the model ([`Weak`]) is shown to disagree with the definition on these cases.

use super::*;
use crate::genlanes::model::{self, Arith, Weak};
use crate::genlanes::LANES;
use crate::genq::GAMMA;
use half::{bf16, f16};

const ARITHS: [Arith; 2] = [Arith::Wide, Arith::Halves];

/// The model's arithmetic for a SIMD path: AVX-512's 64-bit lanes, or AVX2's 32-bit halves.
fn arith_of(path: KernelPath) -> Arith {
    if path.is_wide() {
        Arith::Wide
    } else {
        Arith::Halves
    }
}

/// The SIMD paths this CPU runs (whatever `CLIP_PARITY_SIMD` says), with a note for those it lacks.
fn simd_paths(note: &str) -> Vec<KernelPath> {
    let paths: Vec<KernelPath> = KernelPath::all_here().into_iter().filter(|p| p.is_simd()).collect();
    if !paths.iter().any(|p| p.is_wide()) {
        eprintln!("{note}: no AVX-512 generator on this CPU: the model is checked against the definition, not against simd.rs's GenQ16");
    }
    if paths.is_empty() {
        eprintln!("{note}: no AVX2 + F16C on this CPU: the model is checked against the definition, not against simd.rs's GenQ8");
    }
    paths
}

/// Boundaries in x = key + gamma + i, the splitmix64 input: multiples of 2^30 where the tables'
/// S & 15 changes (each of its 16 values, and 2^34 where it wraps to 0 while S's higher bits change),
/// 2^32, far ones, 2^64 - 2^30 and 0 (x wraps past 2^64).
fn x_boundaries() -> Vec<u64> {
    let mut b: Vec<u64> = (0..=17u64).map(|j| j << 30).collect();
    b.extend([31u64, 32, 33, 0x1234_5679, 0x3_ffff_fff0, 0x3_ffff_ffff].map(|j| j << 30));
    b.push(0x8000_0000_0000_0000);
    b
}

/// Starts that put index start + before at each boundary: of x (above), of key + i at 2^32 and at
/// 2^64 (where it wraps), and of i itself at 2^64 (start near u64::MAX: the index wraps).
fn starts(key: u64, before: u64) -> Vec<u64> {
    let mut s: Vec<u64> = x_boundaries().into_iter().map(|b| b.wrapping_sub(before).wrapping_sub(key).wrapping_sub(GAMMA)).collect();
    s.extend([1u64 << 32, 0].map(|b| b.wrapping_sub(before).wrapping_sub(key)));
    s.push(0u64.wrapping_sub(before));
    s
}

const KEYS: [u64; 3] = [0, 0x0123_4567_89ab_cdef, u64::MAX];

/// How many lanes of 8 steps of the model's stream differ from q(key, m, start + 16 s + j), over
/// every boundary start with 0..=80 indices before it (every offset of a boundary in a vector,
/// and up to 5 steps of tables made before it), for m = 8, 11, 24 and one other of 2..=23.
fn stream_disagreements(arith: Arith, weak: Weak) -> usize {
    let mut bad = 0;
    let mut other = 2;
    for key in KEYS {
        for before in 0..=80u64 {
            for start in starts(key, before) {
                other = if other >= 23 { 2 } else { other + 1 };
                for m in [8, 11, 24, other] {
                    let mut g = model::Stream::new(arith, weak, key, m, start);
                    for s in 0..8u64 {
                        let q = g.next16();
                        for (j, &q) in q.iter().enumerate() {
                            let i = start.wrapping_add(16 * s + j as u64);
                            bad += (q as i64 != crate::genq::q(key, m, i)) as usize;
                        }
                    }
                }
            }
        }
    }
    bad
}

#[test]
fn lane_model_stream_equals_q_at_every_boundary() {
    for arith in ARITHS {
        assert_eq!(stream_disagreements(arith, Weak::Exact), 0, "{arith:?}");
    }
}

/// The (spec dtype, e) of the SIMD fill (every value exact in f32): exponents where the values are
/// exact in every dtype, and where they round in bf16 (subnormal) or in f16 (subnormal, overflow).
fn specs() -> Vec<GenSpec> {
    let mut v = Vec::new();
    for dtype in DType::ALL {
        let lowest = dtype.gen_m() as i32 - 150;
        for exp in [0, -1, 1, -4, 5, 15, 16, 127, -14, -15, -24, -25, -100, -126, -127, -134, lowest, lowest + 1, lowest - 1] {
            let s = GenSpec::new(1, 0, "w", dtype, exp, GenMode::Gen);
            if s.exact_in(DType::F32) && !v.contains(&s) {
                v.push(s);
            }
        }
    }
    v
}

fn bits<T: Elem>(v: &[T]) -> Vec<u32> {
    v.iter().map(|x| x.bits()).collect()
}

/// The definition: value(start + k) rounded to T, by the portable generator.
fn definition<T: Elem>(s: &GenSpec, key: u64, start: u64, n: usize) -> Vec<u32> {
    let mut v = vec![model::unwritten::<T>(); n];
    s.fill_range(key, start, &mut v);
    bits(&v)
}

/// The model's fill, with the arguments gen.rs gives the SIMD fill.
fn model_fill<T: Elem>(arith: Arith, weak: Weak, s: &GenSpec, key: u64, start: u64, n: usize) -> Vec<u32> {
    assert!(s.exact_in(DType::F32), "outside the SIMD fill: {s:?}");
    bits(&model::fill::<T>(arith, weak, key, s.m(), pow2(s.unit_exp()) as f32, start, n, !s.exact_in(T::DTYPE)))
}

/// The model (both arithmetics) equals the definition, and each SIMD path equals its model.
fn check_fill<T: Elem>(s: &GenSpec, key: u64, start: u64, n: usize, paths: &[KernelPath]) {
    let want = definition::<T>(s, key, start, n);
    let models = ARITHS.map(|arith| {
        let got = model_fill::<T>(arith, Weak::Exact, s, key, start, n);
        assert_eq!(got, want, "model {arith:?} into {:?}: {s:?} key {key:#x} start {start:#x} n {n}", T::DTYPE);
        got
    });
    for &path in paths {
        let mut v = vec![model::unwritten::<T>(); n];
        s.fill_range_with(path, key, start, &mut v);
        let m = &models[ARITHS.iter().position(|&a| a == arith_of(path)).expect("an arithmetic")];
        assert_eq!(&bits(&v), m, "{path:?} against its model into {:?}: {s:?} key {key:#x} start {start:#x} n {n}", T::DTYPE);
    }
}

/// check_fill into the element type `t`.
fn check_fill_into(t: DType, s: &GenSpec, key: u64, start: u64, n: usize, paths: &[KernelPath]) {
    match t {
        DType::F32 => check_fill::<f32>(s, key, start, n, paths),
        DType::BF16 => check_fill::<bf16>(s, key, start, n, paths),
        DType::F16 => check_fill::<f16>(s, key, start, n, paths),
    }
}

/// Whether the model with `weak` fills as the definition does, into the element type `t`.
fn weak_fill_agrees(arith: Arith, weak: Weak, t: DType, s: &GenSpec, key: u64, start: u64, n: usize) -> bool {
    fn go<T: Elem>(arith: Arith, weak: Weak, s: &GenSpec, key: u64, start: u64, n: usize) -> bool {
        model_fill::<T>(arith, weak, s, key, start, n) == definition::<T>(s, key, start, n)
    }
    match t {
        DType::F32 => go::<f32>(arith, weak, s, key, start, n),
        DType::BF16 => go::<bf16>(arith, weak, s, key, start, n),
        DType::F16 => go::<f16>(arith, weak, s, key, start, n),
    }
}

/// The boundary fills: every boundary start with `before` indices before it, lengths 0..=3 * 16 + 1
/// (empty, shorter than a vector, whole vectors, one more) and some that cross the boundary from
/// further away; each (spec dtype, e, element type) in turn. `f` gets (spec, key, start, n, t).
fn for_boundary_fills(mut f: impl FnMut(&GenSpec, u64, u64, usize, DType)) {
    let specs = specs();
    let mut turn = 0usize;
    let key = KEYS[1];
    for before in (0..=17u64).chain([31, 32, 33, 47, 48, 49, 64, 100]) {
        for start in starts(key, before) {
            let lens = (0..=3 * LANES + 1).chain([before as usize + 16, before as usize + 33, 300]);
            for n in lens {
                turn += 1;
                let s = &specs[turn % specs.len()];
                let t = DType::ALL[(turn / specs.len()) % 3];
                f(s, key, start, n, t);
            }
        }
    }
}

#[test]
fn lane_model_fill_equals_definition_at_every_boundary() {
    let paths = simd_paths("lane_model_fill_equals_definition_at_every_boundary");
    for_boundary_fills(|s, key, start, n, t| check_fill_into(t, s, key, start, n, &paths));
}

use super::simd_parity::Rng;

/// A random case: any key, a start anywhere (or near u64::MAX, or small), any length up to 1000
/// (or a few vectors and a part), any (spec dtype, e) of the SIMD fill, any element type.
fn random_case(r: &mut Rng) -> (GenSpec, u64, u64, usize, DType) {
    let dtype = DType::ALL[r.below(3) as usize];
    let lowest = dtype.gen_m() as i32 - 150;
    let exp = lowest + r.below((127 - lowest + 1) as u64) as i32;
    let s = GenSpec::new(1, 0, "w", dtype, exp, GenMode::Gen);
    let start = match r.below(3) {
        0 => r.next(),
        1 => u64::MAX - r.below(100),
        _ => r.below(1000),
    };
    let n = match r.below(3) {
        0 => r.below(1000) as usize,
        1 => r.below(40) as usize,
        _ => LANES * r.below(8) as usize + r.below(LANES as u64) as usize,
    };
    (s, r.next(), start, n, DType::ALL[r.below(3) as usize])
}

#[test]
fn lane_model_fill_equals_definition_random() {
    let paths = simd_paths("lane_model_fill_equals_definition_random");
    let mut r = Rng(57);
    for _ in 0..4000 {
        let (s, key, start, n, t) = random_case(&mut r);
        check_fill_into(t, &s, key, start, n, &paths);
    }
}

/// Each weakening of the model disagrees with the definition on the cases above: the tests that
/// pass the model would not pass it with any of them.
#[test]
fn lane_model_weakenings_disagree_with_the_definition() {
    // the lane and table arithmetic: on the stream's boundary cases
    for arith in ARITHS {
        for weak in [Weak::TableEdge, Weak::LaneEdge, Weak::Wrap, Weak::Carry] {
            if weak == Weak::Carry && arith == Arith::Wide {
                continue; // the carry of AVX2's halves: no halves in 64-bit lanes
            }
            let bad = stream_disagreements(arith, weak);
            eprintln!("{arith:?} {weak:?}: {bad} stream lanes differ from q");
            assert!(bad > 0, "{arith:?} {weak:?}");
        }
    }
    // every weakening, fills included: on the boundary fills
    for arith in ARITHS {
        for weak in [Weak::TableEdge, Weak::LaneEdge, Weak::Wrap, Weak::Carry, Weak::Tail] {
            if weak == Weak::Carry && arith == Arith::Wide {
                continue; // the carry of AVX2's halves: no halves in 64-bit lanes
            }
            let (mut bad, mut all) = (0, 0);
            for_boundary_fills(|s, key, start, n, t| {
                all += 1;
                bad += !weak_fill_agrees(arith, weak, t, s, key, start, n) as usize;
            });
            eprintln!("{arith:?} {weak:?}: {bad} of {all} boundary fills differ from the definition");
            assert!(bad > 0, "{arith:?} {weak:?}");
        }
    }
    // the table boundary (one step in 2^26) is what random cases alone would miss: the explicit
    // boundaries are needed
    let mut r = Rng(57);
    for _ in 0..500 {
        let (s, key, start, n, t) = random_case(&mut r);
        assert!(weak_fill_agrees(Arith::Wide, Weak::TableEdge, t, &s, key, start, n));
    }
}
