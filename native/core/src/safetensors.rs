//! safetensors read/write: 8-byte little-endian header length N, N bytes of JSON header
//! ({name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {string: string}}), then the
//! raw little-endian data. Offsets are relative to the start of the data section.
//!
//! Reading validates the whole file before anything is allocated: length, header length, UTF-8,
//! JSON, dtypes (F32, BF16, F16), shapes, offsets (in range, matching shape x dtype, no overlap,
//! no hole, no trailing bytes). Writing is atomic: a temporary file in the same directory is
//! written, fsynced and renamed over the target.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::dtype::DType;
use crate::gen::checked_numel;
use crate::json::{self, Value};
use crate::error::{Error, Result};

/// Headers larger than this are refused (the reference implementation uses the same limit).
pub const MAX_HEADER: u64 = 100_000_000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<u64>,
    pub begin: u64,
    pub end: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Sorted by data offset.
    pub entries: Vec<Entry>,
    /// In header order.
    pub metadata: Vec<(String, String)>,
    /// Absolute file offset of the data section (8 + header length).
    pub data_start: u64,
}

fn fail<T>(path: &str, msg: impl std::fmt::Display) -> Result<T> {
    Err(Error(format!("safetensors {path}: {msg}")))
}

/// Parses and validates a header against a file of `file_len` bytes whose first bytes are `head`
/// (at least 8 + header length bytes of it).
pub fn parse_header(path: &str, file_len: u64, head_len_bytes: [u8; 8], header: &[u8]) -> Result<Header> {
    let n = u64::from_le_bytes(head_len_bytes);
    let data_start = 8 + n;
    let data_len = file_len - data_start;
    let text = match std::str::from_utf8(header) {
        Ok(t) => t,
        Err(e) => return fail(path, format!("header is not valid UTF-8 ({e})")),
    };
    let v = match json::parse(text) {
        Ok(v) => v,
        Err(e) => return fail(path, format!("header is not valid JSON: {e}")),
    };
    let Value::Obj(items) = v else {
        return fail(path, format!("header must be a JSON object, found {}", v.kind()));
    };
    let mut entries = Vec::new();
    let mut metadata = Vec::new();
    for (name, val) in items {
        if name == "__metadata__" {
            metadata = metadata_of(path, val)?;
        } else {
            entries.push(entry_of(path, name, val, data_len)?);
        }
    }
    check_contiguous(path, &mut entries, data_len)?;
    Ok(Header { entries, metadata, data_start })
}

/// The `__metadata__` object: strings only.
fn metadata_of(path: &str, val: Value) -> Result<Vec<(String, String)>> {
    let Value::Obj(m) = val else {
        return fail(path, format!("__metadata__ must be an object of strings, found {}", val.kind()));
    };
    let mut metadata = Vec::new();
    for (k, x) in m {
        let Value::Str(s) = x else {
            return fail(path, format!("__metadata__ '{k}' must be a string, found {}", x.kind()));
        };
        metadata.push((k, s));
    }
    Ok(metadata)
}

/// One tensor's entry: its three fields, each checked, and a byte span that fits its shape and the file.
fn entry_of(path: &str, name: String, val: Value, data_len: u64) -> Result<Entry> {
    let Value::Obj(fields) = val else {
        return fail(path, format!("tensor '{name}': entry must be an object, found {}", val.kind()));
    };
    let (mut dtype, mut shape, mut offs) = (None, None, None);
    for (k, x) in fields {
        match k.as_str() {
            "dtype" => dtype = Some(dtype_field(path, &name, &x)?),
            "shape" => {
                let dims = match &x {
                    Value::Arr(a) => a.iter().map(|d| d.as_u64()).collect::<Option<Vec<u64>>>(),
                    _ => None,
                };
                match dims {
                    Some(d) => shape = Some(d),
                    None => return fail(path, format!("tensor '{name}': shape must be an array of non-negative integers")),
                }
            }
            "data_offsets" => {
                let o = match &x {
                    Value::Arr(a) if a.len() == 2 => a[0].as_u64().zip(a[1].as_u64()),
                    _ => None,
                };
                match o {
                    Some(o) => offs = Some(o),
                    None => return fail(path, format!("tensor '{name}': data_offsets must be [begin, end] (non-negative integers)")),
                }
            }
            other => return fail(path, format!("tensor '{name}': unknown field \"{other}\"")),
        }
    }
    let Some(dtype) = dtype else { return fail(path, format!("tensor '{name}': missing dtype")) };
    let Some(shape) = shape else { return fail(path, format!("tensor '{name}': missing shape")) };
    let Some((begin, end)) = offs else { return fail(path, format!("tensor '{name}': missing data_offsets")) };
    let need = checked_numel(&shape).and_then(|n| n.checked_mul(dtype.size() as u64));
    let Some(need) = need else {
        return fail(path, format!("tensor '{name}': shape {shape:?} is too large"));
    };
    if begin > end {
        return fail(path, format!("tensor '{name}': data_offsets [{begin}, {end}] has begin > end"));
    }
    if end - begin != need {
        return fail(
            path,
            format!(
                "tensor '{name}': data_offsets [{begin}, {end}] span {} bytes but shape {shape:?} x {} needs {need} bytes",
                end - begin,
                dtype.st_name()
            ),
        );
    }
    if end > data_len {
        return fail(path, format!("tensor '{name}': data_offsets [{begin}, {end}] are beyond the data section ({data_len} bytes; file truncated?)"));
    }
    Ok(Entry { name, dtype, shape, begin, end })
}

/// A tensor's `dtype` field: one of the names this harness reads.
fn dtype_field(path: &str, name: &str, x: &Value) -> Result<DType> {
    let Value::Str(s) = x else {
        return fail(path, format!("tensor '{name}': dtype must be a string, found {}", x.kind()));
    };
    match DType::from_st_name(s) {
        Some(d) => Ok(d),
        None => fail(path, format!("tensor '{name}': dtype \"{s}\" is not supported (supported: F32, BF16, F16)")),
    }
}

/// The tensors, sorted by offset, tile the data section exactly: no overlap, no hole, nothing after.
fn check_contiguous(path: &str, entries: &mut [Entry], data_len: u64) -> Result<()> {
    entries.sort_by_key(|e| (e.begin, e.end));
    let mut pos = 0u64;
    for e in entries.iter() {
        if e.begin < pos {
            return fail(path, format!("tensor '{}': data_offsets [{}, {}] overlap the previous tensor (which ends at {pos})", e.name, e.begin, e.end));
        }
        if e.begin > pos {
            return fail(path, format!("tensor '{}': hole in the data section: bytes [{pos}, {}) belong to no tensor", e.name, e.begin));
        }
        pos = e.end;
    }
    if pos != data_len {
        return fail(path, format!("{} trailing bytes after the last tensor (data section is {data_len} bytes, tensors end at {pos})", data_len - pos));
    }
    Ok(())
}

/// Reads and validates the header of a file (the data itself is not read).
pub fn read_header(path: &str) -> Result<Header> {
    let mut f = match File::open(path) {
        Ok(f) => f,
        Err(e) => return fail(path, format!("cannot open: {e}")),
    };
    let file_len = match f.metadata() {
        Ok(m) => m.len(),
        Err(e) => return fail(path, format!("cannot stat: {e}")),
    };
    if file_len < 8 {
        return fail(path, format!("file is too short ({file_len} bytes) to hold the 8-byte header length"));
    }
    let mut lb = [0u8; 8];
    if let Err(e) = f.read_exact(&mut lb) {
        return fail(path, format!("cannot read the header length: {e}"));
    }
    let n = u64::from_le_bytes(lb);
    if n > file_len - 8 {
        return fail(path, format!("header length {n} is beyond the end of the file ({file_len} bytes; truncated or not a safetensors file)"));
    }
    if n > MAX_HEADER {
        return fail(path, format!("header length {n} exceeds the limit of {MAX_HEADER} bytes"));
    }
    let mut header = vec![0u8; n as usize];
    if let Err(e) = f.read_exact(&mut header) {
        return fail(path, format!("cannot read the header: {e}"));
    }
    parse_header(path, file_len, lb, &header)
}

/// Reads dst.len() bytes at absolute offset `at`.
pub fn read_data(f: &mut File, path: &str, at: u64, dst: &mut [u8]) -> Result<()> {
    if dst.is_empty() {
        return Ok(());
    }
    if let Err(e) = f.seek(SeekFrom::Start(at)).and_then(|_| f.read_exact(dst)) {
        return fail(path, format!("cannot read {} bytes at offset {at}: {e}", dst.len()));
    }
    Ok(())
}

pub struct OutTensor<'a> {
    pub name: &'a str,
    pub dtype: DType,
    pub shape: &'a [u64],
    pub data: &'a [u8],
}

/// The header JSON (padded with spaces to a multiple of 8 bytes) for tensors laid out in order.
pub fn build_header(path: &str, tensors: &[OutTensor], metadata: &[(String, String)]) -> Result<Vec<u8>> {
    let mut names = std::collections::HashSet::new();
    let mut h = String::from("{");
    let mut first = true;
    if !metadata.is_empty() {
        let mut md: Vec<&(String, String)> = metadata.iter().collect();
        md.sort();
        for w in md.windows(2) {
            if w[0].0 == w[1].0 {
                return fail(path, format!("metadata key '{}' appears twice", w[0].0));
            }
        }
        h.push_str("\"__metadata__\":{");
        h.push_str(&md.iter().map(|(k, v)| format!("{}:{}", json::quote(k), json::quote(v))).collect::<Vec<_>>().join(","));
        h.push('}');
        first = false;
    }
    let mut off = 0u64;
    for t in tensors {
        if t.name == "__metadata__" || t.name.is_empty() {
            return fail(path, format!("invalid tensor name \"{}\"", t.name));
        }
        if !names.insert(t.name) {
            return fail(path, format!("tensor name '{}' appears twice", t.name));
        }
        if !first {
            h.push(',');
        }
        first = false;
        let end = off + t.data.len() as u64;
        h.push_str(&format!(
            "{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{off},{end}]}}",
            json::quote(t.name),
            t.dtype.st_name(),
            t.shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(",")
        ));
        off = end;
    }
    h.push('}');
    let mut b = h.into_bytes();
    while b.len() % 8 != 0 {
        b.push(b' ');
    }
    Ok(b)
}

fn temp_path(target: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    let tmp = format!(".{name}.tmp-{}-{}-{nanos}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed));
    target.with_file_name(tmp)
}

/// Writes the file atomically: temp file in the same directory, fsync, rename, fsync the directory.
pub fn write_atomic(path: &str, tensors: &[OutTensor], metadata: &[(String, String)]) -> Result<()> {
    let header = build_header(path, tensors, metadata)?;
    let target = Path::new(path);
    if target.file_name().is_none() {
        return fail(path, "not a file path");
    }
    let tmp = temp_path(target);
    let res = (|| -> std::io::Result<()> {
        let f = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
        w.write_all(&(header.len() as u64).to_le_bytes())?;
        w.write_all(&header)?;
        for t in tensors {
            w.write_all(t.data)?;
        }
        let f = w.into_inner().map_err(|e| e.into_error())?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, target)?;
        let dir = match target.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all(); // best effort: makes the rename durable
        }
        Ok(())
    })();
    if let Err(e) = res {
        let _ = std::fs::remove_file(&tmp);
        return fail(path, format!("cannot write: {e}"));
    }
    Ok(())
}
