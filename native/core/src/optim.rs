//! Optimizer and resharding kernels for the checkpoint-resume checks (SPEC section 9).
//!
//! `adamw`: one torch.optim.AdamW step (foreach=False, amsgrad=False, maximize=False) on one
//! tensor, float32 parameter and state, every element computed with the same float32 operations in
//! the same order (no FMA contraction), so a run is bitwise reproducible:
//!
//! ```text
//! scalars (float64, as Python computes them, then each rounded once to float32):
//!   decay = f32(1 - lr * weight_decay)      w1 = f32(1 - beta1)        b2 = f32(beta2)
//!   c2 = f32(1 - beta2)                      eps = f32(eps)
//!   bc1 = 1 - beta1^step                     bc2 = 1 - beta2^step        (float64 pow)
//!   neg_step_size = f32(-(lr / bc1))         bc2_sqrt = f32(sqrt(bc2))
//! per element (float32; g = f32(grad)):
//!   p = p * decay
//!   m = |w1| < 0.5 ? m + w1 * (g - m) : g - (g - m) * (1 - w1)      (torch.lerp)
//!   v = v * b2 + (c2 * g) * g                                       (mul_, addcmul_)
//!   d = sqrt(v) / bc2_sqrt + eps
//!   p = p + (neg_step_size * m) / d                                 (addcdiv_)
//! ```
//!
//! `copy_block`: copies the intersection of two blocks of the same global tensor from one local
//! shard into another (the primitive of resharding).

use crate::bail;
use crate::dtype::Elem;
use crate::error::Result;
use crate::gen::Block;
use crate::path::multiversion;

/// AdamW hyper-parameters (torch names; betas = (beta1, beta2)).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamW {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

/// The float32 scalars of one step (see the module comment).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWScalars {
    pub decay: f32,
    pub w1: f32,
    pub b2: f32,
    pub c2: f32,
    pub neg_step_size: f32,
    pub bc2_sqrt: f32,
    pub eps: f32,
}

impl AdamW {
    pub fn validate(&self) -> Result<()> {
        let AdamW { lr, beta1, beta2, eps, weight_decay } = *self;
        if !(lr.is_finite() && lr >= 0.0) {
            bail!("adamw: lr {lr} must be finite and >= 0");
        }
        if !(0.0..1.0).contains(&beta1) {
            bail!("adamw: beta1 {beta1} must be in [0, 1)");
        }
        if !(0.0..1.0).contains(&beta2) {
            bail!("adamw: beta2 {beta2} must be in [0, 1)");
        }
        if !(eps.is_finite() && eps >= 0.0) {
            bail!("adamw: eps {eps} must be finite and >= 0");
        }
        if !(weight_decay.is_finite() && weight_decay >= 0.0) {
            bail!("adamw: weight_decay {weight_decay} must be finite and >= 0");
        }
        Ok(())
    }

    /// The scalars of the step whose step count (after the increment) is `step` >= 1.
    pub fn scalars(&self, step: u64) -> AdamWScalars {
        let s = step as f64;
        let bc1 = 1.0 - self.beta1.powf(s);
        let bc2 = 1.0 - self.beta2.powf(s);
        AdamWScalars {
            decay: (1.0 - self.lr * self.weight_decay) as f32,
            w1: (1.0 - self.beta1) as f32,
            b2: self.beta2 as f32,
            c2: (1.0 - self.beta2) as f32,
            neg_step_size: (-(self.lr / bc1)) as f32,
            bc2_sqrt: bc2.sqrt() as f32,
            eps: self.eps as f32,
        }
    }
}

/// One element of the step (exposed for tests and for outside re-implementations).
#[inline(always)]
pub fn adamw_elem(k: &AdamWScalars, p: f32, g: f32, m: f32, v: f32) -> (f32, f32, f32) {
    let p = p * k.decay;
    let m = if k.w1.abs() < 0.5 { m + k.w1 * (g - m) } else { g - (g - m) * (1.0 - k.w1) };
    let v = v * k.b2 + k.c2 * g * g;
    let d = v.sqrt() / k.bc2_sqrt + k.eps;
    let p = p + k.neg_step_size * m / d;
    (p, m, v)
}

multiversion! {
    /// One AdamW step over equal-length slices.
    pub fn adamw<T: Elem>(param: &mut [f32], grad: &[T], m: &mut [f32], v: &mut [f32], k: &AdamWScalars) -> () {
        let n = param.len();
        let (grad, m, v) = (&grad[..n], &mut m[..n], &mut v[..n]);
        for i in 0..n {
            let (p, mi, vi) = adamw_elem(k, param[i], grad[i].to_f32(), m[i], v[i]);
            param[i] = p;
            m[i] = mi;
            v[i] = vi;
        }
    }
}

/// The intersection of two blocks of the same global shape, or None when it is empty.
pub fn intersect(a: &Block, b: &Block) -> Option<Block> {
    let d = a.global_shape.len();
    let mut start = vec![0u64; d];
    let mut len = vec![0u64; d];
    for k in 0..d {
        let s = a.start[k].max(b.start[k]);
        let e = (a.start[k] + a.len[k]).min(b.start[k] + b.len[k]);
        if e <= s {
            return None;
        }
        start[k] = s;
        len[k] = e - s;
    }
    Some(Block { global_shape: a.global_shape.clone(), start, len })
}

/// Copies the elements of `dst_block ∩ src_block` from `src` (holding src_block, row-major) into
/// `dst` (holding dst_block). Returns how many elements were copied. Blocks must be validated and
/// have the same global shape; slices must have the blocks' sizes.
pub fn copy_block<T: Copy>(dst: &mut [T], dst_block: &Block, src: &[T], src_block: &Block) -> u64 {
    let Some(x) = intersect(dst_block, src_block) else { return 0 };
    let d = x.global_shape.len();
    if d == 0 {
        dst[0] = src[0];
        return 1;
    }
    // local row-major strides of each block
    let strides = |b: &Block| {
        let mut s = vec![1u64; d];
        for k in (0..d - 1).rev() {
            s[k] = s[k + 1] * b.len[k + 1];
        }
        s
    };
    let (ds, ss) = (strides(dst_block), strides(src_block));
    let run = x.len[d - 1] as usize;
    let mut idx = vec![0u64; d]; // odometer over the outer dims of x (relative to x.start)
    loop {
        let (mut so, mut dof) = (0u64, 0u64);
        for k in 0..d {
            let g = x.start[k] + idx[k];
            so += (g - src_block.start[k]) * ss[k];
            dof += (g - dst_block.start[k]) * ds[k];
        }
        let (so, dof) = (so as usize, dof as usize);
        dst[dof..dof + run].copy_from_slice(&src[so..so + run]);
        let mut k = d - 1;
        loop {
            if k == 0 {
                return x.numel();
            }
            k -= 1;
            idx[k] += 1;
            if idx[k] < x.len[k] {
                break;
            }
            idx[k] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HP: AdamW = AdamW { lr: 8e-4, beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1 };

    #[test]
    fn adamw_matches_the_formula_by_hand() {
        // step 1 from zero state: m = 0.1 g, v = 0.05 g^2 (in f32), bc1 = 0.1, bc2 = 0.05
        let k = HP.scalars(1);
        assert_eq!(k.decay, (1.0f64 - 8e-4 * 0.1) as f32);
        assert_eq!(k.w1, 0.1f64 as f32);
        assert_eq!(k.neg_step_size, (-(8e-4 / (1.0 - 0.9f64))) as f32);
        let (p0, g) = (0.5f32, -0.25f32);
        let (p, m, v) = adamw_elem(&k, p0, g, 0.0, 0.0);
        let m_want = 0.0f32 + k.w1 * (g - 0.0);
        let v_want = 0.0f32 * k.b2 + k.c2 * g * g;
        let d = v_want.sqrt() / k.bc2_sqrt + k.eps;
        assert_eq!((m, v), (m_want, v_want));
        assert_eq!(p, p0 * k.decay + k.neg_step_size * m_want / d);
        // the first Adam step moves each weight by about lr * sign(g) (plus the decay)
        assert!(((p - p0 * k.decay) - 8e-4).abs() < 1e-6, "{p}");
        // a large weight (w1 >= 0.5) uses the other lerp branch
        let big = AdamW { beta1: 0.25, ..HP }.scalars(3);
        let (_, m2, _) = adamw_elem(&big, 1.0, 2.0, 1.0, 0.0);
        assert_eq!(m2, 2.0 - (2.0 - 1.0) * (1.0 - 0.75f32));
    }
}
