//! The standard library: the files of `lib/`, built into vlad so that `(include "ad")` works
//! from any directory without `-I` (docs/language.md, "include").

/// Each library file's name (what `include` takes) and text.
pub const FILES: &[(&str, &str)] = &[
    ("list", include_str!("../../../lib/list.vlad")),
    ("ad", include_str!("../../../lib/ad.vlad")),
    ("array", include_str!("../../../lib/array.vlad")),
    ("numeric", include_str!("../../../lib/numeric.vlad")),
];

/// The path a library file is known by in messages: `<lib>/NAME.vlad`.
pub fn path(name: &str) -> String {
    format!("{PREFIX}{name}.vlad")
}

/// The directory part of library paths.
pub const PREFIX: &str = "<lib>/";

/// The library file `name` includes (`name` or `name.vlad`), if there is one.
pub fn find(name: &str) -> Option<(&'static str, &'static str)> {
    let name = name.strip_suffix(".vlad").unwrap_or(name);
    FILES.iter().copied().find(|(n, _)| *n == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_of_lib_is_built_in() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../lib");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .expect("lib/")
            .filter_map(|e| {
                let p = e.ok()?.path();
                let stem = p.file_stem()?.to_string_lossy().into_owned();
                (p.extension()? == "vlad").then_some(stem)
            })
            .collect();
        on_disk.sort();
        let mut built_in: Vec<String> = FILES.iter().map(|(n, _)| n.to_string()).collect();
        built_in.sort();
        assert_eq!(on_disk, built_in);
        assert_eq!(find("ad.vlad").map(|f| f.0), Some("ad"));
        assert!(find("nonesuch").is_none());
    }
}
