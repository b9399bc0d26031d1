//! Every translation from JS values to core types lives here. Errors name the field, the value
//! and what is allowed.

use clip_parity_core::exact::BigUint;
use clip_parity_core::gen::{EXP_MAX, EXP_MIN};
use clip_parity_core::StoreKind;
use clip_parity_core::{Block, DType, FillItem, GenMode, GenSpec, VerifyItem};
use napi::bindgen_prelude::{BigInt, FromNapiValue, JsValue, Object, Unknown};
use napi::{Error, Result, ValueType};

/// Largest integer a JS number holds exactly.
pub const MAX_SAFE: f64 = 9_007_199_254_740_991.0;

pub fn err<T>(msg: impl Into<String>) -> Result<T> {
    Err(Error::from_reason(msg.into()))
}

pub fn core_err(e: clip_parity_core::Error) -> Error {
    Error::from_reason(e.0)
}

fn show(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else {
        format!("{v}")
    }
}

/// A non-negative integer number (<= 2^53 - 1).
pub fn uint(field: &str, v: f64) -> Result<u64> {
    if v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v <= MAX_SAFE {
        Ok(v as u64)
    } else {
        err(format!("{field}: {} is not a non-negative integer (0 <= {field} <= 2^53 - 1)", show(v)))
    }
}

pub fn uint_max(field: &str, v: f64, max: u64) -> Result<u64> {
    let x = uint(field, v)?;
    if x > max {
        return err(format!("{field}: {x} is larger than the maximum {max}"));
    }
    Ok(x)
}

pub fn int_range(field: &str, v: f64, lo: i64, hi: i64) -> Result<i64> {
    if v.is_finite() && v.fract() == 0.0 && v >= lo as f64 && v <= hi as f64 {
        Ok(v as i64)
    } else {
        err(format!("{field}: {} is not an integer in [{lo}, {hi}]", show(v)))
    }
}

pub fn id(field: &str, v: f64) -> Result<u32> {
    if v.is_finite() && v >= 1.0 && v.fract() == 0.0 && v <= u32::MAX as f64 {
        Ok(v as u32)
    } else {
        err(format!("{field}: {} is not a tensor id (an integer >= 1)", show(v)))
    }
}

pub fn ids(field: &str, v: &[f64]) -> Result<Vec<u32>> {
    v.iter().enumerate().map(|(k, &x)| id(&format!("{field}[{k}]"), x)).collect()
}

pub fn rank(field: &str, v: f64) -> Result<usize> {
    Ok(uint_max(field, v, u32::MAX as u64)? as usize)
}

pub fn dims(field: &str, v: &[f64]) -> Result<Vec<u64>> {
    v.iter().enumerate().map(|(k, &x)| uint(&format!("{field}[{k}]"), x)).collect()
}

pub fn dtype(field: &str, s: &str) -> Result<DType> {
    DType::parse(s).map_or_else(|| err(format!("{field}: \"{s}\" is not one of f32, bf16, f16")), Ok)
}

/// A store's backend: cpu, meta or cuda.
pub fn store_kind(field: &str, s: &str) -> Result<StoreKind> {
    StoreKind::parse(s).map_or_else(|| err(format!("{field}: \"{s}\" is not one of {}", StoreKind::NAMES)), Ok)
}

fn bigint_text(b: &BigInt) -> String {
    let n = BigUint { limbs: b.words.clone() };
    format!("{}{}n", if b.sign_bit { "-" } else { "" }, n.to_decimal())
}

/// A BigInt in [0, 2^64).
pub fn u64_of(field: &str, b: &BigInt) -> Result<u64> {
    let v = b.words.first().copied().unwrap_or(0);
    let lossless = b.words.iter().skip(1).all(|&w| w == 0);
    // more than 64 bits, or negative (a sign bit on zero is 0n: accepted)
    if !lossless || (b.sign_bit && v != 0) {
        return err(format!("{field}: {} is not a u64 (a bigint with 0n <= {field} < 2n ** 64n)", bigint_text(b)));
    }
    Ok(v)
}

pub fn bigint_u64(v: u64) -> BigInt {
    BigInt { sign_bit: false, words: vec![v] }
}

pub fn bigint_of(n: BigUint) -> BigInt {
    let mut words = n.normalized().limbs;
    if words.is_empty() {
        words.push(0);
    }
    BigInt { sign_bit: false, words }
}

fn type_name(t: ValueType) -> &'static str {
    match t {
        ValueType::Undefined => "undefined",
        ValueType::Null => "null",
        ValueType::Boolean => "a boolean",
        ValueType::Number => "a number",
        ValueType::String => "a string",
        ValueType::Symbol => "a symbol",
        ValueType::Object => "an object",
        ValueType::Function => "a function",
        ValueType::External => "an external",
        ValueType::BigInt => "a bigint",
        _ => "an unknown value",
    }
}

/// Reads typed fields of a JS object argument with errors that name the field.
pub struct Fields<'a> {
    obj: Object<'a>,
    what: String,
}

impl<'a> Fields<'a> {
    /// `what`: the argument's path in messages ("gen", "items[3].block").
    pub fn of(what: &str, v: &Unknown<'a>) -> Result<Fields<'a>> {
        let t = v.get_type()?;
        if t != ValueType::Object {
            return err(format!("{what}: expected an object, got {}", type_name(t)));
        }
        // SAFETY: checked to be an object.
        Ok(Fields { obj: unsafe { v.cast::<Object<'a>>()? }, what: what.to_string() })
    }
    /// The field's value, which must be present (an object or array to read further).
    pub fn value(&self, f: &str, want: &str) -> Result<Unknown<'a>> {
        self.raw(f)?.map_or_else(|| self.missing(f, want), |(u, _)| Ok(u))
    }
    /// The field's value and its type; None when undefined (or absent).
    fn raw(&self, f: &str) -> Result<Option<(Unknown<'a>, ValueType)>> {
        match self.obj.get::<Unknown<'a>>(f)? {
            None => Ok(None),
            Some(u) => {
                let t = u.get_type()?;
                if t == ValueType::Undefined {
                    Ok(None)
                } else {
                    Ok(Some((u, t)))
                }
            }
        }
    }
    fn missing<T>(&self, f: &str, want: &str) -> Result<T> {
        err(format!("{}.{f}: missing (expected {want})", self.what))
    }
    fn wrong<T>(&self, f: &str, want: &str, t: ValueType) -> Result<T> {
        err(format!("{}.{f}: expected {want}, got {}", self.what, type_name(t)))
    }
    pub fn opt_num(&self, f: &str) -> Result<Option<f64>> {
        match self.raw(f)? {
            None => Ok(None),
            // SAFETY: type checked.
            Some((u, ValueType::Number)) => Ok(Some(unsafe { u.cast::<f64>()? })),
            Some((_, t)) => self.wrong(f, "a number", t),
        }
    }
    pub fn num(&self, f: &str) -> Result<f64> {
        self.opt_num(f)?.map_or_else(|| self.missing(f, "a number"), Ok)
    }
    pub fn str(&self, f: &str) -> Result<String> {
        match self.raw(f)? {
            None => self.missing(f, "a string"),
            // SAFETY: type checked.
            Some((u, ValueType::String)) => unsafe { u.cast::<String>() },
            Some((_, t)) => self.wrong(f, "a string", t),
        }
    }
    pub fn bigint(&self, f: &str) -> Result<BigInt> {
        match self.raw(f)? {
            None => self.missing(f, "a bigint"),
            // SAFETY: type checked.
            Some((u, ValueType::BigInt)) => unsafe { u.cast::<BigInt>() },
            Some((_, t)) => self.wrong(f, "a bigint", t),
        }
    }
    /// An optional array of strings (undefined: None).
    pub fn opt_strs(&self, f: &str) -> Result<Option<Vec<String>>> {
        let Some((u, t)) = self.raw(f)? else { return Ok(None) };
        self.items(f, u, t, ValueType::String, "string").map(Some)
    }
    pub fn nums(&self, f: &str) -> Result<Vec<f64>> {
        let Some((u, t)) = self.raw(f)? else { return self.missing(f, "an array of numbers") };
        self.items(f, u, t, ValueType::Number, "number")
    }
    /// The items of array field `f` (value `u` of type `t`), each of JS type `item` (`item_name` in errors).
    fn items<T: FromNapiValue>(&self, f: &str, u: Unknown<'a>, t: ValueType, item: ValueType, item_name: &str) -> Result<Vec<T>> {
        // SAFETY: napi_is_array on a live value.
        let is_array = t == ValueType::Object && unsafe { u.cast::<Object<'a>>()? }.is_array()?;
        if !is_array {
            return self.wrong(f, &format!("an array of {item_name}s"), t);
        }
        // SAFETY: checked to be an array.
        let items = unsafe { u.cast::<Vec<Unknown<'a>>>()? };
        let mut out = Vec::with_capacity(items.len());
        for (k, x) in items.iter().enumerate() {
            let t = x.get_type()?;
            if t != item {
                return err(format!("{}.{f}[{k}]: expected a {item_name}, got {}", self.what, type_name(t)));
            }
            // SAFETY: type checked.
            out.push(unsafe { x.cast::<T>()? });
        }
        Ok(out)
    }
}

pub fn gen_spec(v: &Unknown<'_>) -> Result<GenSpec> {
    gen_spec_at("gen", v)
}

/// The GenSpec at `at` ("gen", "items[3].gen"): errors name `at.field`.
pub fn gen_spec_at(at: &str, v: &Unknown<'_>) -> Result<GenSpec> {
    let g = Fields::of(at, v)?;
    let seed = u64_of(&format!("{at}.seed"), &g.bigint("seed")?)?;
    let step = uint_max(&format!("{at}.step"), g.num("step")?, u32::MAX as u64)? as u32;
    let name = g.str("name")?;
    let dtype = dtype(&format!("{at}.dtype"), &g.str("dtype")?)?;
    let exp = int_range(&format!("{at}.exp"), g.num("exp")?, EXP_MIN as i64, EXP_MAX as i64)? as i32;
    let mode_s = g.str("mode")?;
    let mode = GenMode::parse(&mode_s)
        .map_or_else(|| err(format!("{at}.mode: \"{mode_s}\" is not one of {}", GenMode::NAMES)), Ok)?;
    let special = match (g.opt_num("specialIndex")?, g.opt_num("specialValue")?) {
        (None, None) => None,
        (Some(i), Some(v)) => Some((uint(&format!("{at}.specialIndex"), i)?, v)),
        (Some(i), None) => return err(format!("{at}.specialValue: missing while {at}.specialIndex is {}", show(i))),
        (None, Some(v)) => return err(format!("{at}.specialIndex: missing while {at}.specialValue is {}", show(v))),
    };
    let sum_of = g.opt_strs("sumOf")?.unwrap_or_default();
    let spec = GenSpec { seed, step, name, dtype, exp, mode, special, sum_of };
    spec.validate().map_err(|e| in_item(at, "gen", e))?;
    Ok(spec)
}

pub fn block(v: &Unknown<'_>) -> Result<Block> {
    block_at("block", v)
}

/// The Block at `at` ("block", "items[3].block").
pub fn block_at(at: &str, v: &Unknown<'_>) -> Result<Block> {
    let b = Fields::of(at, v)?;
    let blk = Block {
        global_shape: dims(&format!("{at}.globalShape"), &b.nums("globalShape")?)?,
        start: dims(&format!("{at}.start"), &b.nums("start")?)?,
        len: dims(&format!("{at}.len"), &b.nums("len")?)?,
    };
    blk.validate().map_err(|e| in_item(at, "block", e))?;
    Ok(blk)
}

/// A core error about the argument at `at`: as it is for the argument itself (`name`), prefixed
/// with the item ("items[3]: block: ...") for an argument inside a list.
fn in_item(at: &str, name: &str, e: clip_parity_core::Error) -> Error {
    match at.strip_suffix(name).and_then(|p| p.strip_suffix('.')) {
        Some(item) => Error::from_reason(format!("{item}: {}", e.0)),
        None => core_err(e),
    }
}

/// The elements of a JS array argument.
fn array<'a>(field: &str, v: &Unknown<'a>) -> Result<Vec<Unknown<'a>>> {
    let t = v.get_type()?;
    // SAFETY: napi_is_array on a live value.
    if t != ValueType::Object || !unsafe { v.cast::<Object<'a>>()? }.is_array()? {
        return err(format!("{field}: expected an array, got {}", type_name(t)));
    }
    // SAFETY: checked to be an array.
    unsafe { v.cast::<Vec<Unknown<'a>>>() }
}

/// allocFillMany's items: `{ shape, gen, block }` each.
pub fn fill_items(field: &str, v: &Unknown<'_>) -> Result<Vec<FillItem>> {
    let mut out = Vec::new();
    for (k, x) in array(field, v)?.iter().enumerate() {
        let at = format!("{field}[{k}]");
        let f = Fields::of(&at, x)?;
        let shape = dims(&format!("{at}.shape"), &f.nums("shape")?)?;
        let spec = gen_spec_at(&format!("{at}.gen"), &f.value("gen", "an object")?)?;
        let block = block_at(&format!("{at}.block"), &f.value("block", "an object")?)?;
        out.push(FillItem { shape, spec, block });
    }
    Ok(out)
}

/// verifyScaledMany's items: `{ id, gen, block, coef }` each.
pub fn verify_items(field: &str, v: &Unknown<'_>) -> Result<Vec<VerifyItem>> {
    let mut out = Vec::new();
    for (k, x) in array(field, v)?.iter().enumerate() {
        let at = format!("{field}[{k}]");
        let f = Fields::of(&at, x)?;
        let id = id(&format!("{at}.id"), f.num("id")?)?;
        let spec = gen_spec_at(&format!("{at}.gen"), &f.value("gen", "an object")?)?;
        let block = block_at(&format!("{at}.block"), &f.value("block", "an object")?)?;
        let coef = f.num("coef")?;
        out.push(VerifyItem { id, spec, block, coef });
    }
    Ok(out)
}

/// p of a p-norm: finite and > 0.
pub fn p(v: f64) -> Result<f64> {
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        err(format!("p: {} must be a finite number > 0 (use maxAbs for p = Infinity)", show(v)))
    }
}
