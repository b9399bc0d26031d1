//! NVRTC, the CUDA runtime compiler, loaded by hand (dlopen) rather than through cudarc: cudarc
//! 0.19 looks only for the library names of CUDA 12 and older (`libnvrtc.so`, `libnvrtc.so.12`,
//! ...) through the loader's search path and panics when none loads, while a CUDA 13 machine has
//! `libnvrtc.so.13`, often outside that path. Here the candidates are explicit, every failure is
//! an error that lists what was tried, and nothing panics.
//!
//! Search order: `$CLIP_PARITY_NVRTC` (a file, or a folder holding libnvrtc), then the names
//! `libnvrtc.so.13`, `libnvrtc.so.12`, `libnvrtc.so` through the dynamic loader (LD_LIBRARY_PATH,
//! ldconfig), then those names in `$CUDA_HOME/lib64`, `$CUDA_PATH/lib64`, `/usr/local/cuda/lib64`
//! and `/usr/local/cuda/targets/x86_64-linux/lib`.
//! NVRTC needs no GPU and no driver: CI compiles every kernel with it (cuda::kernels tests).

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::error::{Error, Result};

type Prog = *mut c_void;
type FnCreate = unsafe extern "C" fn(*mut Prog, *const c_char, *const c_char, c_int, *const *const c_char, *const *const c_char) -> c_int;
type FnCompile = unsafe extern "C" fn(Prog, c_int, *const *const c_char) -> c_int;
type FnSize = unsafe extern "C" fn(Prog, *mut usize) -> c_int;
type FnGet = unsafe extern "C" fn(Prog, *mut c_char) -> c_int;
type FnDestroy = unsafe extern "C" fn(*mut Prog) -> c_int;
type FnVersion = unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int;
type FnErr = unsafe extern "C" fn(c_int) -> *const c_char;

/// A loaded NVRTC library.
pub struct Nvrtc {
    _lib: libloading::Library,
    pub path: String,
    pub version: (i32, i32),
    create: FnCreate,
    compile: FnCompile,
    log_size: FnSize,
    log: FnGet,
    ptx_size: FnSize,
    ptx: FnGet,
    cubin_size: Option<FnSize>,
    cubin: Option<FnGet>,
    destroy: FnDestroy,
    err: FnErr,
}

// SAFETY: NVRTC's API is thread safe (programs are not shared between threads here).
unsafe impl Send for Nvrtc {}
// SAFETY: as for Send: NVRTC's API is thread safe.
unsafe impl Sync for Nvrtc {}

const NAMES: [&str; 3] = ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"];

fn candidates() -> Vec<String> {
    let mut v = Vec::new();
    if let Ok(p) = std::env::var("CLIP_PARITY_NVRTC") {
        if !p.is_empty() {
            let path = Path::new(&p);
            if path.is_dir() {
                v.extend(NAMES.iter().map(|n| path.join(n).to_string_lossy().into_owned()));
            } else {
                v.push(p);
            }
        }
    }
    v.extend(NAMES.iter().map(|n| n.to_string()));
    let mut dirs: Vec<PathBuf> = Vec::new();
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Ok(h) = std::env::var(var) {
            if !h.is_empty() {
                dirs.push(Path::new(&h).join("lib64"));
            }
        }
    }
    dirs.push("/usr/local/cuda/lib64".into());
    dirs.push("/usr/local/cuda/targets/x86_64-linux/lib".into());
    for d in dirs {
        v.extend(NAMES.iter().map(|n| d.join(n).to_string_lossy().into_owned()));
    }
    let mut seen = std::collections::HashSet::new();
    v.retain(|x| seen.insert(x.clone()));
    v
}

fn load_from(path: &str) -> std::result::Result<Nvrtc, String> {
    // SAFETY: loading NVRTC runs its initializers, which have no preconditions.
    let lib = unsafe { libloading::Library::new(path) }.map_err(|e| e.to_string())?;
    macro_rules! sym {
        ($name:literal) => {
            // SAFETY: the symbol has the signature of NVRTC's C API (nvrtc.h).
            *unsafe { lib.get($name) }.map_err(|e| format!("{}: {e}", String::from_utf8_lossy(&$name[..$name.len() - 1])))?
        };
    }
    let version: FnVersion = sym!(b"nvrtcVersion\0");
    let mut n = Nvrtc {
        path: path.to_string(),
        version: (0, 0),
        create: sym!(b"nvrtcCreateProgram\0"),
        compile: sym!(b"nvrtcCompileProgram\0"),
        log_size: sym!(b"nvrtcGetProgramLogSize\0"),
        log: sym!(b"nvrtcGetProgramLog\0"),
        ptx_size: sym!(b"nvrtcGetPTXSize\0"),
        ptx: sym!(b"nvrtcGetPTX\0"),
        // SAFETY: as above (absent before CUDA 11.1).
        cubin_size: unsafe { lib.get::<FnSize>(b"nvrtcGetCUBINSize\0") }.ok().map(|s| *s),
        // SAFETY: as for cubin_size: a symbol of the library just loaded, declared with NVRTC's signature.
        cubin: unsafe { lib.get::<FnGet>(b"nvrtcGetCUBIN\0") }.ok().map(|s| *s),
        destroy: sym!(b"nvrtcDestroyProgram\0"),
        err: sym!(b"nvrtcGetErrorString\0"),
        _lib: lib,
    };
    let (mut major, mut minor) = (0, 0);
    // SAFETY: two valid out pointers.
    if unsafe { version(&mut major, &mut minor) } != 0 {
        return Err("nvrtcVersion failed".into());
    }
    n.version = (major, minor);
    Ok(n)
}

/// The NVRTC library, loaded once per process; the error lists every candidate tried.
pub fn get() -> std::result::Result<&'static Nvrtc, String> {
    static LIB: OnceLock<std::result::Result<Nvrtc, String>> = OnceLock::new();
    LIB.get_or_init(|| {
        let mut tried = Vec::new();
        for c in candidates() {
            // A name without a folder that is not found is the common case: keep the message short.
            match load_from(&c) {
                Ok(n) => return Ok(n),
                Err(e) if c.contains('/') && Path::new(&c).exists() => tried.push(format!("{c} ({e})")),
                Err(_) => tried.push(c),
            }
        }
        Err(format!(
            "NVRTC (the CUDA runtime compiler, libnvrtc.so) not found: tried {}. Install the CUDA toolkit or \
             `python3 -m pip install nvidia-cuda-nvrtc-cu12`, then point CLIP_PARITY_NVRTC at the library or its folder",
            tried.join(", ")
        ))
    })
    .as_ref()
    .map_err(|e| e.clone())
}

/// What to produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// PTX text (NUL-terminated), for `compute_XY` or `sm_XY`.
    Ptx,
    /// Machine code for `sm_XY` (needs no PTX JIT in the driver, so an NVRTC newer than the driver works).
    Cubin,
}

/// The options every kernel build uses: nothing may contract or flush (results must equal the cpu's).
pub fn options(arch: &str) -> Vec<String> {
    vec![
        format!("--gpu-architecture={arch}"),
        "--fmad=false".into(),
        "--ftz=false".into(),
        "--prec-div=true".into(),
        "--prec-sqrt=true".into(),
        "--std=c++17".into(),
    ]
}

impl Nvrtc {
    fn err_str(&self, code: c_int) -> String {
        // SAFETY: nvrtcGetErrorString returns a static string for any code.
        let p = unsafe { (self.err)(code) };
        if p.is_null() {
            format!("NVRTC error {code}")
        } else {
            // SAFETY: a NUL-terminated static string.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    }

    /// Compiles `src` for `arch` (e.g. "sm_90", "compute_80"). The error holds NVRTC's log.
    pub fn compile(&self, src: &str, name: &str, arch: &str, out: Output) -> Result<Vec<u8>> {
        let csrc = CString::new(src).map_err(|_| Error("NVRTC: the source holds a NUL byte".into()))?;
        let cname = CString::new(name).map_err(|_| Error("NVRTC: the name holds a NUL byte".into()))?;
        let opts: Vec<CString> = options(arch).into_iter().map(|o| CString::new(o).expect("no NUL")).collect();
        let optp: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
        let mut prog: Prog = std::ptr::null_mut();
        // SAFETY: valid C strings; no headers.
        let rc = unsafe { (self.create)(&mut prog, csrc.as_ptr(), cname.as_ptr(), 0, std::ptr::null(), std::ptr::null()) };
        if rc != 0 {
            return Err(Error(format!("NVRTC ({}): cannot create the program: {}", self.path, self.err_str(rc))));
        }
        struct Guard<'a>(&'a Nvrtc, Prog);
        impl Drop for Guard<'_> {
            fn drop(&mut self) {
                // SAFETY: the program was created and is destroyed once.
                unsafe { (self.0.destroy)(&mut self.1) };
            }
        }
        let g = Guard(self, prog);
        // SAFETY: the program is valid; the option pointers outlive the call.
        let rc = unsafe { (self.compile)(g.1, optp.len() as c_int, optp.as_ptr()) };
        if rc != 0 {
            let log = self.read(g.1, self.log_size, self.log).map(|b| String::from_utf8_lossy(&b).trim_end_matches('\0').to_string());
            return Err(Error(format!(
                "NVRTC {}.{} ({}) could not compile {name} for {arch}: {}\n{}",
                self.version.0,
                self.version.1,
                self.path,
                self.err_str(rc),
                log.unwrap_or_default()
            )));
        }
        match out {
            Output::Ptx => self.read(g.1, self.ptx_size, self.ptx),
            Output::Cubin => match (self.cubin_size, self.cubin) {
                (Some(s), Some(c)) => self.read(g.1, s, c),
                _ => Err(Error(format!("NVRTC {}.{} ({}) cannot produce CUBIN", self.version.0, self.version.1, self.path))),
            },
        }
    }

    fn read(&self, prog: Prog, size: FnSize, get: FnGet) -> Result<Vec<u8>> {
        let mut n = 0usize;
        // SAFETY: valid program and out pointer.
        let rc = unsafe { size(prog, &mut n) };
        if rc != 0 {
            return Err(Error(format!("NVRTC: {}", self.err_str(rc))));
        }
        let mut buf = vec![0u8; n];
        // SAFETY: the buffer has the size NVRTC reported.
        let rc = unsafe { get(prog, buf.as_mut_ptr() as *mut c_char) };
        if rc != 0 {
            return Err(Error(format!("NVRTC: {}", self.err_str(rc))));
        }
        Ok(buf)
    }
}
