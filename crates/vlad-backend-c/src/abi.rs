//! The ABI the generated code shares with `runtime.c`, written from the Rust definitions (one
//! source of truth): the AD tags' numbers (`vlad_core::Tag`), the kinds of runtime objects
//! (`vlad_ir::ObjKind`) and the kinds of the AD maps of boxed closures (`vlad_ir::MapKind`).
//! `runtime.c` uses the names only; a test checks that it defines none of them itself.

use std::fmt::Write as _;
use vlad_core::Tag;
use vlad_ir::{MapKind, ObjKind};

/// The AD tags, by number.
const TAGS: [(Tag, &str); 4] = [
    (Tag::Forward, "VL_FORWARD"),
    (Tag::Perturbation, "VL_PERTURBATION"),
    (Tag::Sensitivity, "VL_SENSITIVITY"),
    (Tag::Reverse, "VL_REVERSE"),
];

/// The layouts of flat arrays the runtime makes itself, first in `vl_layouts` (the compiler
/// numbers the program's after them): an array of reals, and an array of pointers.
pub const LAYOUTS: [(&str, &str); 2] = [("d", "VL_LAYOUT_REALS"), ("v", "VL_LAYOUT_BOXED")];

/// The C definitions of the constants (`enum`s), for the head of every program.
pub fn constants() -> String {
    let mut out =
        String::from("/* The ABI shared with the compiler (vlad-backend-c/src/abi.rs). */\n");
    let mut line = |items: Vec<(String, u32)>| {
        let body: Vec<String> = items.iter().map(|(n, v)| format!("{n} = {v}")).collect();
        let _ = writeln!(out, "enum {{ {} }};", body.join(", "));
    };
    line(
        TAGS.iter()
            .map(|(t, n)| (n.to_string(), *t as u32))
            .collect(),
    );
    line(
        ObjKind::ALL
            .iter()
            .map(|k| (k.c_name().to_string(), k.number()))
            .collect(),
    );
    line(
        MapKind::NAMED
            .iter()
            .map(|(k, n)| (n.to_string(), k.number()))
            .collect(),
    );
    line(
        LAYOUTS
            .iter()
            .enumerate()
            .map(|(i, (_, n))| (n.to_string(), i as u32))
            .collect(),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runtime_defines_none_of_the_abi_constants_itself() {
        let rt = crate::RUNTIME;
        let names: Vec<String> = TAGS
            .iter()
            .map(|(_, n)| n.to_string())
            .chain(ObjKind::ALL.iter().map(|k| k.c_name().to_string()))
            .chain(MapKind::NAMED.iter().map(|(_, n)| n.to_string()))
            .chain(LAYOUTS.iter().map(|(_, n)| n.to_string()))
            .collect();
        // The enumerations runtime.c declares, and its macros.
        let enums: Vec<&str> = rt
            .split("enum {")
            .skip(1)
            .map(|rest| rest.split('}').next().unwrap_or(""))
            .collect();
        for n in &names {
            assert!(
                !enums.iter().any(|e| e
                    .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .any(|w| w == n)),
                "runtime.c declares {n} itself"
            );
            assert!(
                !rt.contains(&format!("#define {n} ")),
                "runtime.c defines {n} itself"
            );
        }
        let c = constants();
        assert!(c.contains("VL_REVERSE = 3"), "{c}");
        assert!(c.contains("VL_FLATREF = 11"), "{c}");
        assert!(c.contains("VL_MAP_ZERO_SENS = 14"), "{c}");
        // The tags are numbered as the Rust enum numbers them.
        assert_eq!(Tag::Reverse as u32, 3);
    }
}
