//! Procedures of a VLAD program called from Rust: the program compiled to a shared library
//! ([`crate::export`]) and loaded into the process.
//!
//! ```
//! use vlad::library::{Arg, Library, Value};
//! let dir = tempfile::tempdir().unwrap();
//! let file = dir.path().join("lib.vlad");
//! std::fs::write(
//!     &file,
//!     "(include \"ad\")\n\
//!      (define (f x) (* x (sin x)))\n\
//!      (define (df x) ((derivative-R f) x))\n\
//!      (define (sum-of-squares v) (ifold (lambda (s i) (+ s (* (get v i) (get v i)))) 0 (array-length v)))\n\
//!      (define (grad v) ((gradient-R sum-of-squares) v))\n",
//! )
//! .unwrap();
//! let mut lib = Library::build(&file, &["df(real)", "grad(array)"]).unwrap();
//! let Value::Real(d) = lib.call("df", &[Arg::Real(2.0)]).unwrap() else { panic!() };
//! assert!((d - (2f64.sin() + 2.0 * 2f64.cos())).abs() < 1e-12);
//! let g = lib.call("grad", &[Arg::Reals(&[1.0, 2.0, 3.0])]).unwrap();
//! assert_eq!(g.to_string(), "#(2 4 6)");
//! ```

use crate::export::{Shape, Signature};
use std::ffi::{c_char, c_void, CStr};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

type V = *mut c_void;

/// An argument of an exported procedure.
#[derive(Clone, Debug)]
pub enum Arg<'a> {
    Real(f64),
    /// An array of reals.
    Reals(&'a [f64]),
    /// An array of arrays.
    Array(Vec<Arg<'a>>),
}

/// A value an exported procedure returned, copied out of the library.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Nil,
    Bool(bool),
    Real(f64),
    Pair(Box<Value>, Box<Value>),
    Array(Vec<Value>),
    /// A procedure, or a value of the AD operators (a dual number, a tagged value).
    Other,
}

impl Value {
    /// The reals of an array of reals.
    pub fn reals(&self) -> Option<Vec<f64>> {
        match self {
            Value::Array(xs) => xs
                .iter()
                .map(|x| match x {
                    Value::Real(r) => Some(*r),
                    _ => None,
                })
                .collect(),
            _ => None,
        }
    }

    /// The elements of a list (`()`-terminated pairs).
    pub fn list(&self) -> Option<Vec<Value>> {
        let (mut out, mut at) = (Vec::new(), self);
        loop {
            match at {
                Value::Nil => return Some(out),
                Value::Pair(a, d) => {
                    out.push((**a).clone());
                    at = d;
                }
                _ => return None,
            }
        }
    }
}

/// Written as VLAD writes values (`vlad run`'s output).
impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Nil => write!(f, "()"),
            Value::Bool(b) => write!(f, "{}", if *b { "#t" } else { "#f" }),
            Value::Real(r) => write!(f, "{}", vlad_core::number::format_real(*r)),
            Value::Array(xs) => {
                write!(f, "#(")?;
                for (i, x) in xs.iter().enumerate() {
                    write!(f, "{}{x}", if i > 0 { " " } else { "" })?;
                }
                write!(f, ")")
            }
            Value::Pair(a, d) => {
                write!(f, "({a}")?;
                let mut rest = &**d;
                loop {
                    match rest {
                        Value::Nil => break,
                        Value::Pair(a, d) => {
                            write!(f, " {a}")?;
                            rest = d;
                        }
                        other => {
                            write!(f, " . {other}")?;
                            break;
                        }
                    }
                }
                write!(f, ")")
            }
            Value::Other => write!(f, "<other>"),
        }
    }
}

/// The runtime's interface, as the library defines it (`vlad_backend_c::header`).
struct Api {
    init: unsafe extern "C" fn() -> i32,
    reset: unsafe extern "C" fn(),
    error: unsafe extern "C" fn() -> *const c_char,
    real: unsafe extern "C" fn(f64) -> V,
    array_f64: unsafe extern "C" fn(*const f64, i64) -> V,
    array: unsafe extern "C" fn(*const V, i64) -> V,
    kind: unsafe extern "C" fn(V) -> i32,
    real_of: unsafe extern "C" fn(V) -> f64,
    boolean_of: unsafe extern "C" fn(V) -> i32,
    car: unsafe extern "C" fn(V) -> V,
    cdr: unsafe extern "C" fn(V) -> V,
    length: unsafe extern "C" fn(V) -> i64,
    at: unsafe extern "C" fn(V, i64) -> V,
}

type Entry = unsafe extern "C" fn(*const V) -> V;

/// A compiled VLAD library loaded into the process. Its state (the arena of values, the last
/// error) is global to the shared object, so a `Library` makes one call at a time (`call`
/// takes `&mut self`) and is neither `Send` nor `Sync`; each [`Library::build`] compiles to a
/// file of its own, so two libraries share nothing.
pub struct Library {
    api: Api,
    entries: Vec<(Signature, Entry)>,
    // Dropped after the functions above, before the directory that holds the file.
    _lib: libloading::Library,
    _dir: Option<tempfile::TempDir>,
    _one_thread: PhantomData<*const ()>,
}

impl Library {
    /// Compiles the procedures `exports` (`"name(real, array)"`: see [`Signature`]) of the
    /// program in `file` and loads them. The error is the diagnostic `vlad compile` prints.
    pub fn build(file: impl AsRef<Path>, exports: &[&str]) -> Result<Library, String> {
        Library::build_with(file.as_ref(), &[], exports, true)
    }

    /// [`Library::build`] with include directories, and `native`: compile for this machine
    /// (`-march=native`).
    pub fn build_with(
        file: &Path,
        include: &[PathBuf],
        exports: &[&str],
        native: bool,
    ) -> Result<Library, String> {
        let sigs: Vec<Signature> = exports
            .iter()
            .map(|s| s.parse())
            .collect::<Result<_, _>>()?;
        let text = std::fs::read_to_string(file)
            .map_err(|e| format!("vlad: error: cannot read {}: {e}\n", file.display()))?;
        let c = crate::export::library_c(file, &text, include, &sigs, None)?;
        let dir = tempfile::tempdir().map_err(|e| format!("cannot make a directory: {e}"))?;
        let so = dir.path().join("library.so");
        crate::cc::compile_shared(&c.c, &so, native)?;
        let mut lib = Library::open(&so, &sigs)?;
        lib._dir = Some(dir);
        Ok(lib)
    }

    /// Loads a library `vlad compile --lib` built, which exports `exports`.
    pub fn open(path: &Path, exports: &[Signature]) -> Result<Library, String> {
        // SAFETY: the library is one vlad compiled: loading it runs no initialisers.
        let lib = unsafe { libloading::Library::new(path) }
            .map_err(|e| format!("cannot load {}: {e}", path.display()))?;
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the symbol has this type in every library vlad compiles
                // (runtime.c, under VL_LIBRARY).
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                    .map_err(|e| format!("{} is not a vlad library: {e}", path.display()))?
            };
        }
        let api = Api {
            init: sym!("vlad_init"),
            reset: sym!("vlad_reset"),
            error: sym!("vlad_error"),
            real: sym!("vlad_real"),
            array_f64: sym!("vlad_array_f64"),
            array: sym!("vlad_array"),
            kind: sym!("vlad_kind"),
            real_of: sym!("vlad_real_of"),
            boolean_of: sym!("vlad_boolean_of"),
            car: sym!("vlad_car"),
            cdr: sym!("vlad_cdr"),
            length: sym!("vlad_length"),
            at: sym!("vlad_at"),
        };
        let mut entries = Vec::new();
        for s in exports {
            let name = format!("vlad_{}_argv\0", s.c_name());
            // SAFETY: every entry point's `_argv` form has this type.
            let f: Entry = *unsafe { lib.get(name.as_bytes()) }
                .map_err(|e| format!("{} does not export `{}`: {e}", path.display(), s.name))?;
            entries.push((s.clone(), f));
        }
        let library = Library {
            api,
            entries,
            _lib: lib,
            _dir: None,
            _one_thread: PhantomData,
        };
        // SAFETY: the library's own function; the library is loaded.
        if unsafe { (library.api.init)() } != 0 {
            return Err(library.last_error());
        }
        Ok(library)
    }

    /// The exported procedures.
    pub fn exports(&self) -> impl Iterator<Item = &Signature> {
        self.entries.iter().map(|(s, _)| s)
    }

    /// Calls the exported procedure `name` (its name in the program) on `args`, which must
    /// have the shapes it was exported with. The values the call made are freed before it
    /// returns (the result is copied out). A run-time error of the program is its message,
    /// as `vlad run` prints it.
    pub fn call(&mut self, name: &str, args: &[Arg]) -> Result<Value, String> {
        let (sig, entry) = self
            .entries
            .iter()
            .find(|(s, _)| s.name == name)
            .ok_or_else(|| format!("the library does not export `{name}`"))?;
        if sig.args.len() != args.len() {
            return Err(format!(
                "`{name}` takes {} arguments ({sig}), not {}",
                sig.args.len(),
                args.len()
            ));
        }
        for (i, (shape, arg)) in sig.args.iter().zip(args).enumerate() {
            if !fits(shape, arg) {
                return Err(format!(
                    "argument {} of `{name}` must be {shape} ({sig})",
                    i + 1
                ));
            }
        }
        let entry = *entry;
        let boxed: Vec<V> = args.iter().map(|a| self.boxed(a)).collect();
        // SAFETY: the entry point takes one value per argument, built above by the library.
        let r = unsafe { entry(boxed.as_ptr()) };
        let out = if r.is_null() {
            Err(self.last_error())
        } else {
            Ok(self.value(r))
        };
        // SAFETY: no value of the library is kept (the result was copied).
        unsafe { (self.api.reset)() };
        out
    }

    fn last_error(&self) -> String {
        // SAFETY: the library's own function; its result is a C string or null.
        let e = unsafe { (self.api.error)() };
        if e.is_null() {
            "vlad: error: the call failed".into()
        } else {
            // SAFETY: a NUL-terminated string the library keeps until the next error.
            unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
        }
    }

    fn boxed(&self, a: &Arg) -> V {
        // SAFETY: the library's constructors; pointers and lengths from slices.
        unsafe {
            match a {
                Arg::Real(x) => (self.api.real)(*x),
                Arg::Reals(xs) => (self.api.array_f64)(xs.as_ptr(), xs.len() as i64),
                Arg::Array(xs) => {
                    let items: Vec<V> = xs.iter().map(|x| self.boxed(x)).collect();
                    (self.api.array)(items.as_ptr(), items.len() as i64)
                }
            }
        }
    }

    fn value(&self, v: V) -> Value {
        // SAFETY: `v` is a value the library returned, alive until the reset.
        unsafe {
            match (self.api.kind)(v) {
                0 => Value::Nil,
                1 => Value::Bool((self.api.boolean_of)(v) != 0),
                2 => Value::Real((self.api.real_of)(v)),
                3 => Value::Pair(
                    Box::new(self.value((self.api.car)(v))),
                    Box::new(self.value((self.api.cdr)(v))),
                ),
                4 => Value::Array(
                    (0..(self.api.length)(v))
                        .map(|i| self.value((self.api.at)(v, i)))
                        .collect(),
                ),
                _ => Value::Other,
            }
        }
    }
}

/// Whether `arg` has the shape `shape`.
fn fits(shape: &Shape, arg: &Arg) -> bool {
    match (shape, arg) {
        (Shape::Real, Arg::Real(_)) => true,
        (Shape::Array(e), Arg::Reals(_)) => **e == Shape::Real,
        (Shape::Array(e), Arg::Array(xs)) => xs.iter().all(|x| fits(e, x)),
        _ => false,
    }
}
