//! Tests of the cpu and meta stores (store.rs), including the store ops whose kernels live below
//! (optim.rs: adamwStep, copyBlock) and the safetensors files a store saves and loads.

use std::path::{Path, PathBuf};

use super::*;
use crate::gen::GenMode;
use crate::optim::{adamw_elem, AdamWScalars};
use crate::safetensors::read_header;

#[test]
fn sum_tensors_is_the_f32_sum_in_list_order_rounded_once() {
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        let mut st = Store::new(Backend::Cpu, 1).unwrap();
        let ids: Vec<u32> = (0..3).map(|_| st.alloc(0, dtype, &[7, 5]).unwrap()).collect();
        for (k, &id) in ids.iter().enumerate() {
            let g = GenSpec::new(11, 0, &format!("part{k}"), dtype, -1 - k as i32, GenMode::Gen);
            st.fill_grad(id, &g, &Block::full(&[7, 5])).unwrap();
        }
        let want: Vec<f64> = (0..35u64)
            .map(|i| {
                let s = ids.iter().fold(-0f32, |a, &id| a + st.get_element(id, i).unwrap() as f32);
                match dtype {
                    DType::F32 => s as f64,
                    DType::BF16 => bf16::from_f32(s).to_f64(),
                    DType::F16 => f16::from_f32(s).to_f64(),
                }
            })
            .collect();
        st.sum_tensors(ids[0], &ids).unwrap(); // dst among the sources, as a tensor all_reduce does
        let got: Vec<f64> = (0..35u64).map(|i| st.get_element(ids[0], i).unwrap()).collect();
        assert_eq!(got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), want.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), "{dtype:?}");
        let other = st.alloc(0, dtype, &[5, 7]).unwrap();
        assert!(st.sum_tensors(ids[0], &[ids[1], other]).unwrap_err().0.contains("does not match the destination"));
    }
}

#[test]
fn sum_tensors_keeps_negative_zero_and_neg_zeros_is_the_identity() {
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        let mut st = Store::new(Backend::Cpu, 1).unwrap();
        let (a, b) = (st.alloc(0, dtype, &[4]).unwrap(), st.alloc(0, dtype, &[4]).unwrap());
        st.fill_grad(a, &GenSpec::new(0, 0, "a", dtype, 0, GenMode::NegZeros), &Block::full(&[4])).unwrap();
        st.fill_grad(b, &GenSpec::new(0, 0, "b", dtype, 0, GenMode::NegZeros), &Block::full(&[4])).unwrap();
        st.sum_tensors(a, &[a, b]).unwrap(); // -0 + -0 is -0, as dist.all_reduce gives; a +0 start made it +0
        assert!((0..4).all(|i| st.get_element(a, i).unwrap().to_bits() == (-0f64).to_bits()), "{dtype:?}");
    }
}

#[test]
fn ledger_by_hand() {
    let mut s = Store::new(Backend::Cpu, 2).unwrap();
    let a = s.alloc(0, DType::F32, &[3, 5]).unwrap(); // 60 bytes
    let b = s.alloc(0, DType::BF16, &[7]).unwrap(); // 14 bytes
    let c = s.alloc(1, DType::F16, &[2, 2, 2]).unwrap(); // 16 bytes
    assert_eq!(s.live_bytes(0).unwrap(), 74);
    assert_eq!(s.peak_bytes(0).unwrap(), 74);
    assert_eq!(s.live_bytes(1).unwrap(), 16);
    s.free(a).unwrap();
    assert_eq!(s.live_bytes(0).unwrap(), 14);
    assert_eq!(s.peak_bytes(0).unwrap(), 74);
    s.reset_peak(0).unwrap();
    assert_eq!(s.peak_bytes(0).unwrap(), 14);
    let d = s.alloc(0, DType::F32, &[]).unwrap(); // scalar: 4 bytes
    assert_eq!(s.peak_bytes(0).unwrap(), 18);
    let e = s.narrow(c, 1, 1, 1, 0).unwrap(); // [2,1,2] f16 = 8 bytes, charged to rank 0
    assert_eq!(s.live_bytes(0).unwrap(), 26);
    assert_eq!(s.live_tensors(), 4);
    assert!(s.free(a).unwrap_err().0.contains("already freed"));
    assert!(s.free(999).unwrap_err().0.contains("no such tensor"));
    for id in [b, c, d, e] {
        s.free(id).unwrap();
    }
    assert_eq!((s.live_bytes(0).unwrap(), s.live_bytes(1).unwrap()), (0, 0));
    assert_eq!(s.peak_bytes(0).unwrap(), 26);
    assert_eq!(s.live_tensors(), 0);
    assert!(s.alloc(2, DType::F32, &[1]).unwrap_err().0.contains("rank: 2"));
}

#[test]
fn meta_charges_without_storage() {
    let mut s = Store::new(Backend::Meta, 1).unwrap();
    // 30,532,122,624 bf16 elements: 61 GB charged, nothing allocated
    let id = s.alloc(0, DType::BF16, &[30_532_122_624]).unwrap();
    assert_eq!(s.live_bytes(0).unwrap(), 61_064_245_248);
    let spec = GenSpec::new(1, 0, "w", DType::BF16, 0, GenMode::Gen);
    s.fill_grad(id, &spec, &Block::full(&[30_532_122_624])).unwrap();
    assert_eq!(s.sum_abs_pow(id, 2.0).unwrap(), 0.0);
    assert!(s.exact_sum_abs_pow(id, 2.0).unwrap().is_zero());
    assert_eq!(s.max_abs(id).unwrap(), 0.0);
    assert_eq!(s.hash(id).unwrap(), "meta");
    let c = s.clone_tensor(id, 0).unwrap();
    assert_eq!(s.peak_bytes(0).unwrap(), 2 * 61_064_245_248);
    assert_eq!(s.compare(id, c).unwrap(), None);
    assert!(s.save_safetensors("/tmp/x.safetensors", &[], &[]).unwrap_err().0.contains("meta"));
    // validation still happens on meta
    assert!(s.fill_grad(id, &spec, &Block::full(&[5])).is_err());
    s.free(id).unwrap();
    s.free(c).unwrap();
    assert_eq!(s.live_bytes(0).unwrap(), 0);
}

#[test]
fn narrow_cat_round_trip() {
    let mut s = Store::new(Backend::Cpu, 1).unwrap();
    for dt in DType::ALL {
        let id = s.alloc(0, dt, &[4, 6, 3]).unwrap();
        let spec = GenSpec::new(3, 1, "t", dt, 0, GenMode::Gen);
        s.fill_grad(id, &spec, &Block::full(&[4, 6, 3])).unwrap();
        for dim in 0..3 {
            let n = s.get(id).unwrap().shape[dim];
            let a = s.narrow(id, dim, 0, 1, 0).unwrap();
            let b = s.narrow(id, dim, 1, n - 1, 0).unwrap();
            let c = s.cat(&[a, b], dim, 0).unwrap();
            assert_eq!(s.get(c).unwrap().shape, vec![4, 6, 3]);
            assert_eq!(s.compare(id, c).unwrap(), None);
            assert_eq!(s.hash(id).unwrap(), s.hash(c).unwrap());
            // a narrow equals the fill of the corresponding block
            let mut start = vec![0, 0, 0];
            start[dim] = 1;
            let mut len = vec![4, 6, 3];
            len[dim] = n - 1;
            let blk = Block { global_shape: vec![4, 6, 3], start, len: len.clone() };
            let d = s.alloc(0, dt, &len).unwrap();
            s.fill_grad(d, &spec, &blk).unwrap();
            assert_eq!(s.compare(b, d).unwrap(), None);
            for x in [a, b, c, d] {
                s.free(x).unwrap();
            }
        }
        s.free(id).unwrap();
    }
    assert_eq!(s.live_bytes(0).unwrap(), 0);
}

#[test]
fn scale_verify_compare_hash() {
    let mut s = Store::new(Backend::Cpu, 1).unwrap();
    let blk = Block { global_shape: vec![10, 100], start: vec![2, 10], len: vec![5, 50] };
    for dt in DType::ALL {
        let mut spec = GenSpec::new(11, 2, "layer.w", dt, 3, GenMode::Gen);
        spec.special = Some((2 * 100 + 12, f64::NAN));
        let id = s.alloc(0, dt, &[5, 50]).unwrap();
        s.fill_grad(id, &spec, &blk).unwrap();
        assert!(s.get_element(id, 2).unwrap().is_nan());
        let h0 = s.hash(id).unwrap();
        assert_eq!(h0.len(), 16);
        s.scale(id, 0.3).unwrap();
        assert_eq!(s.verify_scaled(id, &spec, &blk, 0.3).unwrap(), None);
        let m = s.verify_scaled(id, &spec, &blk, 0.31).unwrap().unwrap();
        assert_eq!(m.index, 0);
        s.set_element(id, 77, 1234.0).unwrap();
        let m = s.verify_scaled(id, &spec, &blk, 0.3).unwrap().unwrap();
        assert_eq!(m.index, 77);
        assert_ne!(s.hash(id).unwrap(), h0);
        let c = s.clone_tensor(id, 0).unwrap();
        assert_eq!(s.compare(id, c).unwrap(), None);
        s.set_element(c, 100, -0.0).unwrap();
        s.set_element(id, 100, 0.0).unwrap();
        let m = s.compare(id, c).unwrap().unwrap();
        assert_eq!(m.index, 100);
        s.free(c).unwrap();
        s.free(id).unwrap();
    }
}

#[test]
fn alloc_fill_equals_alloc_then_fill() {
    use crate::store_api::{FillItem, VerifyItem};
    for backend in [Backend::Cpu, Backend::Meta] {
        let mut s = Store::new(backend, 2).unwrap();
        let blocks = [
            Block { global_shape: vec![10, 100], start: vec![2, 10], len: vec![5, 50] },
            Block::full(&[]),
            Block { global_shape: vec![4, 0], start: vec![0, 0], len: vec![4, 0] },
            Block::full(&[1003]),
        ];
        for dt in DType::ALL {
            for (mode, exp) in [(GenMode::Gen, 0), (GenMode::Gen, -140), (GenMode::Ones, 0), (GenMode::Zeros, 0)] {
                let mut spec = GenSpec::new(11, 2, "layer.w", dt, exp, mode);
                spec.special = Some((212, f64::NAN));
                for blk in &blocks {
                    let a = s.alloc(1, dt, &blk.len).unwrap();
                    s.fill_grad(a, &spec, blk).unwrap();
                    let b = s.alloc_fill(1, dt, &blk.len, &spec, blk).unwrap();
                    assert_eq!(s.hash(a).unwrap(), s.hash(b).unwrap(), "{dt:?} {mode:?} {blk:?}");
                    assert_eq!(s.get(a).unwrap().shape, s.get(b).unwrap().shape);
                    assert_eq!(s.live_bytes(1).unwrap(), 2 * s.get(a).unwrap().bytes());
                    s.free(a).unwrap();
                    s.free(b).unwrap();
                }
            }
        }
        // errors, in alloc's order, before anything is allocated
        let spec = GenSpec::new(1, 0, "w", DType::F32, 0, GenMode::Gen);
        let blk = Block::full(&[6]);
        assert!(s.alloc_fill(2, DType::F32, &[6], &spec, &blk).unwrap_err().0.starts_with("rank: 2"));
        assert_eq!(
            s.alloc_fill(0, DType::F32, &[2, 4], &spec, &blk).unwrap_err().0,
            "allocFill: block len [6] has 6 elements but shape [2, 4] has 8"
        );
        let bad = GenSpec { exp: 901, ..spec.clone() };
        assert!(s.alloc_fill(0, DType::F32, &[6], &bad, &blk).unwrap_err().0.starts_with("exp: 901"));
        assert_eq!(s.live_tensors(), 0);
        // many: in order, all or nothing
        let items: Vec<FillItem> = (0..5)
            .map(|k| FillItem { shape: vec![k + 1, 3], spec: GenSpec::new(2, 0, &format!("p{k}"), DType::BF16, 0, GenMode::Gen), block: Block::full(&[k + 1, 3]) })
            .collect();
        let ids = s.alloc_fill_many(0, DType::BF16, &items).unwrap();
        assert_eq!(ids.len(), 5);
        assert_eq!(s.live_bytes(0).unwrap(), (1 + 2 + 3 + 4 + 5) * 3 * 2);
        let mut bad = items.clone();
        bad[3].shape = vec![1];
        let e = s.alloc_fill_many(0, DType::BF16, &bad).unwrap_err();
        assert_eq!(e.0, "items[3]: allocFill: block len [4, 3] has 12 elements but shape [1] has 1");
        assert_eq!(s.live_tensors(), 5);
        // verify many: the first mismatch in list order
        let checks = |coef: f64| -> Vec<VerifyItem> {
            ids.iter().zip(&items).map(|(&id, it)| VerifyItem { id, spec: it.spec.clone(), block: it.block.clone(), coef }).collect()
        };
        assert_eq!(s.verify_scaled_many(&checks(1.0)).unwrap(), None);
        if backend == Backend::Cpu {
            s.set_element(ids[4], 2, 77.0).unwrap();
            s.set_element(ids[2], 5, 77.0).unwrap();
            let (k, m) = s.verify_scaled_many(&checks(1.0)).unwrap().unwrap();
            assert_eq!((k, m.index, m.actual), (2, 5, 77.0));
            assert_eq!(Some(m), s.verify_scaled(ids[2], &items[2].spec, &items[2].block, 1.0).unwrap());
        }
        let mut bad = checks(1.0);
        bad[1].block = Block::full(&[7]);
        assert!(s.verify_scaled_many(&bad).unwrap_err().0.starts_with("items[1]: verifyScaled: block len [7]"));
        for id in ids {
            s.free(id).unwrap();
        }
        assert_eq!(s.live_bytes(0).unwrap(), 0);
    }
}

#[test]
fn reused_buffers_never_show_old_contents() {
    // every freed range goes back to the arena (pool.rs) and serves the next buffer of any dtype
    let mut s = Store::new(Backend::Cpu, 1).unwrap();
    let shape = [1001, 1003];
    let blk = Block::full(&shape);
    for dt in DType::ALL {
        let spec = GenSpec::new(5, 0, "big", dt, 0, GenMode::Ones);
        for _ in 0..3 {
            let a = s.alloc_fill(0, dt, &shape, &spec, &blk).unwrap();
            assert_eq!(s.sum_abs_pow(a, 1.0).unwrap(), 1001.0 * 1003.0);
            s.free(a).unwrap();
            // alloc after a free of the same size: zeros, not the ones just freed
            let z = s.alloc(0, dt, &shape).unwrap();
            assert_eq!(s.max_abs(z).unwrap(), 0.0);
            assert_eq!(s.read_pass(z).unwrap(), 0);
            let g = GenSpec::new(5, 0, "big", dt, 0, GenMode::Gen);
            let f = s.alloc_fill(0, dt, &shape, &g, &blk).unwrap(); // reuses nothing stale either
            s.fill_grad(z, &g, &blk).unwrap();
            assert_eq!(s.hash(f).unwrap(), s.hash(z).unwrap());
            s.free(z).unwrap();
            s.free(f).unwrap();
        }
    }
}

#[test]
fn fill_value_get_set() {
    let mut s = Store::new(Backend::Cpu, 1).unwrap();
    let id = s.alloc(0, DType::BF16, &[3]).unwrap();
    s.fill_value(id, 1.0 + 2f64.powi(-8)).unwrap();
    assert_eq!(s.get_element(id, 0).unwrap(), 1.0);
    s.set_element(id, 2, 3.0 * 2f64.powi(-8) + 1.0).unwrap();
    assert_eq!(s.get_element(id, 2).unwrap(), 1.0 + 2f64.powi(-6));
    assert!(s.get_element(id, 3).unwrap_err().0.contains("index: 3"));
    assert_eq!(s.max_abs(id).unwrap(), 1.015625);
}

// ---- training ops (optim.rs) ----

const HP: AdamW = AdamW { lr: 8e-4, beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1 };

#[test]
fn adamw_step_on_the_store_is_deterministic_and_checks_its_arguments() {
    let mut s = Store::new(Backend::Cpu, 1).unwrap();
    let n = 1000u64;
    let blk = Block::full(&[n]);
    let mk = |s: &mut Store, dt: DType, name: &str| {
        let id = s.alloc(0, dt, &[n]).unwrap();
        s.fill_grad(id, &GenSpec::new(5, 0, name, dt, 0, GenMode::Gen), &blk).unwrap();
        id
    };
    let mut hashes = Vec::new();
    for _ in 0..2 {
        let p = mk(&mut s, DType::F32, "param:w");
        let g = mk(&mut s, DType::BF16, "w");
        let m = s.alloc(0, DType::F32, &[n]).unwrap();
        let v = s.alloc(0, DType::F32, &[n]).unwrap();
        for step in 1..=4 {
            s.adamw_step(p, g, m, v, step, &HP).unwrap();
        }
        // element 17 by hand
        let k: Vec<AdamWScalars> = (1..=4).map(|t| HP.scalars(t)).collect();
        let (pe, ge) = (s.get_element(p, 17).unwrap() as f32, s.get_element(g, 17).unwrap() as f32);
        let p0 = {
            let id = mk(&mut s, DType::F32, "param:w");
            let x = s.get_element(id, 17).unwrap() as f32;
            s.free(id).unwrap();
            x
        };
        let (mut pp, mut mm, mut vv) = (p0, 0f32, 0f32);
        for kk in &k {
            (pp, mm, vv) = adamw_elem(kk, pp, ge, mm, vv);
        }
        assert_eq!(pp.to_bits(), pe.to_bits());
        assert_eq!(mm.to_bits(), (s.get_element(m, 17).unwrap() as f32).to_bits());
        assert_eq!(vv.to_bits(), (s.get_element(v, 17).unwrap() as f32).to_bits());
        hashes.push((s.hash(p).unwrap(), s.hash(m).unwrap(), s.hash(v).unwrap()));
        assert!(s.adamw_step(p, g, m, m, 5, &HP).unwrap_err().0.contains("four different tensors"));
        assert!(s.adamw_step(g, p, m, v, 5, &HP).unwrap_err().0.contains("param (tensor"));
        assert!(s.adamw_step(p, g, m, v, 0, &HP).unwrap_err().0.contains("step must be >= 1"));
        let short = s.alloc(0, DType::F32, &[3]).unwrap();
        assert!(s.adamw_step(p, g, m, short, 1, &HP).unwrap_err().0.contains("has 3 elements"));
        for id in [p, g, m, v, short] {
            s.free(id).unwrap();
        }
    }
    assert_eq!(hashes[0], hashes[1]);
    assert_eq!(s.live_bytes(0).unwrap(), 0);
}

#[test]
fn copy_block_reassembles_any_sharding() {
    let mut s = Store::new(Backend::Cpu, 1).unwrap();
    let shape = [5u64, 7, 3];
    let spec = GenSpec::new(1, 1, "t", DType::F32, 0, GenMode::Gen);
    let full = Block::full(&shape);
    let whole = s.alloc(0, DType::F32, &shape).unwrap();
    s.fill_grad(whole, &spec, &full).unwrap();
    // source: dim 0 in chunks of 2, dim 1 in chunks of 4; destination: dim 1 in chunks of 3
    let mut srcs = Vec::new();
    for (a0, l0) in [(0, 2), (2, 2), (4, 1)] {
        for (a1, l1) in [(0, 4), (4, 3)] {
            let b = Block { global_shape: shape.to_vec(), start: vec![a0, a1, 0], len: vec![l0, l1, 3] };
            let id = s.alloc(0, DType::F32, &b.len).unwrap();
            s.fill_grad(id, &spec, &b).unwrap();
            srcs.push((id, b));
        }
    }
    for (a1, l1) in [(0, 3), (3, 3), (6, 1), (7, 0)] {
        let b = Block { global_shape: shape.to_vec(), start: vec![0, a1, 0], len: vec![5, l1, 3] };
        let dst = s.alloc(0, DType::F32, &b.len).unwrap();
        let mut copied = 0;
        for (id, sb) in &srcs {
            copied += s.copy_block(dst, &b, *id, sb).unwrap();
        }
        assert_eq!(copied, b.numel());
        let want = s.alloc(0, DType::F32, &b.len).unwrap();
        s.fill_grad(want, &spec, &b).unwrap();
        assert_eq!(s.compare(want, dst).unwrap(), None);
        // and back into the whole tensor
        let back = s.alloc(0, DType::F32, &shape).unwrap();
        s.copy_block(back, &full, dst, &b).unwrap();
        s.free(want).unwrap();
        s.free(back).unwrap();
        s.free(dst).unwrap();
    }
    let other = s.alloc(0, DType::BF16, &[5, 7, 3]).unwrap();
    assert!(s.copy_block(other, &full, whole, &full).unwrap_err().0.contains("is bf16 but src"));
    let bad = Block { global_shape: vec![5, 7, 4], start: vec![0, 0, 0], len: vec![5, 7, 3] };
    assert!(s.copy_block(other, &full, whole, &bad).unwrap_err().0.contains("globalShape"));
    // scalars
    let a = s.alloc(0, DType::F16, &[]).unwrap();
    let b = s.alloc(0, DType::F16, &[]).unwrap();
    s.fill_value(b, 3.0).unwrap();
    assert_eq!(s.copy_block(a, &Block::full(&[]), b, &Block::full(&[])).unwrap(), 1);
    assert_eq!(s.get_element(a, 0).unwrap(), 3.0);
    for (id, _) in srcs {
        s.free(id).unwrap();
    }
    for id in [whole, other, a, b] {
        s.free(id).unwrap();
    }
    assert_eq!(s.live_bytes(0).unwrap(), 0);
}

// ---- safetensors (safetensors.rs) ----

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("clip-parity-st-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write_raw(p: &Path, header: &str, data: &[u8]) {
    let mut b = (header.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(header.as_bytes());
    b.extend_from_slice(data);
    std::fs::write(p, b).unwrap();
}

#[test]
fn round_trip() {
    let d = tmpdir("rt");
    let p = d.join("a.safetensors");
    let ps = p.to_str().unwrap();
    let mut s = Store::new(Backend::Cpu, 2).unwrap();
    let mut ids = vec![];
    for (k, dt) in DType::ALL.into_iter().enumerate() {
        let shape = [3u64, 4 + k as u64];
        let id = s.alloc(0, dt, &shape).unwrap();
        s.fill_grad(id, &GenSpec::new(5, 1, &format!("t{k}"), dt, 0, GenMode::Gen), &Block::full(&shape)).unwrap();
        ids.push((format!("w.{k} \"q\""), id));
    }
    let e = s.alloc(0, DType::F32, &[0]).unwrap();
    ids.push(("empty".into(), e));
    let md = vec![("step".to_string(), "7".to_string()), ("format".to_string(), "pt".to_string())];
    s.save_safetensors(ps, &ids, &md).unwrap();
    let h = read_header(ps).unwrap();
    assert_eq!(h.metadata, vec![("format".to_string(), "pt".to_string()), ("step".to_string(), "7".to_string())]);
    assert_eq!(h.data_start % 8, 0);
    let loaded = s.load_safetensors(ps, 1).unwrap();
    assert_eq!(loaded.len(), 4);
    for ((n0, a), (n1, b)) in ids.iter().zip(&loaded) {
        assert_eq!(n0, n1);
        assert_eq!(s.compare(*a, *b).unwrap(), None);
        assert_eq!(s.get(*b).unwrap().shape, s.get(*a).unwrap().shape);
        assert_eq!(s.hash(*a).unwrap(), s.hash(*b).unwrap());
    }
    assert_eq!(s.live_bytes(1).unwrap(), s.live_bytes(0).unwrap());
    // no temporary files left behind
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
}

#[test]
fn refusals() {
    let d = tmpdir("bad");
    let mut s = Store::new(Backend::Cpu, 1).unwrap();
    let case = |name: &str, bytes: Vec<u8>, want: &str, s: &mut Store| {
        let p = d.join(name);
        std::fs::write(&p, bytes).unwrap();
        let ps = p.to_str().unwrap();
        let e = s.load_safetensors(ps, 0).unwrap_err().0;
        assert!(e.contains(ps) && e.contains(want), "{name}: {e}");
        assert_eq!(s.live_tensors(), 0, "{name}: half-loaded");
        assert_eq!(s.live_bytes(0).unwrap(), 0);
    };
    case("short", vec![1, 2, 3], "too short", &mut s);
    let mut b = 1000u64.to_le_bytes().to_vec();
    b.extend_from_slice(b"{}");
    case("hdrlen", b, "beyond the end of the file", &mut s);
    let mk = |h: &str, data: &[u8]| {
        let mut b = (h.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(h.as_bytes());
        b.extend_from_slice(data);
        b
    };
    case("json", mk("{\"a\":", &[]), "not valid JSON", &mut s);
    case("notobj", mk("[1]", &[]), "must be a JSON object", &mut s);
    case("dtype", mk(r#"{"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}}"#, &[0; 8]), "dtype \"F64\" is not supported", &mut s);
    case("span", mk(r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}"#, &[0; 4]), "needs 8 bytes", &mut s);
    case("range", mk(r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#, &[0; 4]), "beyond the data section", &mut s);
    case(
        "overlap",
        mk(r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#, &[0; 8]),
        "overlap",
        &mut s,
    );
    case("hole", mk(r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#, &[0; 8]), "hole", &mut s);
    case("trailing", mk(r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#, &[0; 12]), "8 trailing bytes", &mut s);
    case("field", mk(r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}}"#, &[0; 4]), "unknown field", &mut s);
    case("neg", mk(r#"{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}"#, &[0; 4]), "shape must be", &mut s);
    case("md", mk(r#"{"__metadata__":{"a":1}}"#, &[]), "must be a string", &mut s);
    case("utf8", mk("{\"\u{0}\":1}", &[]), "not valid JSON", &mut s);
    let p = d.join("missing.safetensors");
    assert!(s.load_safetensors(p.to_str().unwrap(), 0).unwrap_err().0.contains("cannot open"));
    // a valid file with the raw writer loads
    let p = d.join("ok");
    write_raw(&p, r#"{"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}}"#, &[0x80, 0x3f, 0, 0x40]);
    let ids = s.load_safetensors(p.to_str().unwrap(), 0).unwrap();
    assert_eq!(s.get_element(ids[0].1, 0).unwrap(), 1.0);
    assert_eq!(s.get_element(ids[0].1, 1).unwrap(), 2.0);
}

#[test]
fn atomic_write_leaves_old_file_on_failure() {
    let d = tmpdir("atomic");
    let p = d.join("x.safetensors");
    std::fs::write(&p, b"old").unwrap();
    let mut s = Store::new(Backend::Cpu, 1).unwrap();
    let a = s.alloc(0, DType::F32, &[2]).unwrap();
    // duplicate names are refused before anything is written
    let e = s.save_safetensors(p.to_str().unwrap(), &[("a".into(), a), ("a".into(), a)], &[]).unwrap_err();
    assert!(e.0.contains("twice"));
    assert_eq!(std::fs::read(&p).unwrap(), b"old");
    // unknown id
    assert!(s.save_safetensors(p.to_str().unwrap(), &[("a".into(), 99)], &[]).unwrap_err().0.contains("id 99"));
    // directory that does not exist
    let bad = d.join("nope").join("x.safetensors");
    assert!(s.save_safetensors(bad.to_str().unwrap(), &[("a".into(), a)], &[]).unwrap_err().0.contains("cannot write"));
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
}
