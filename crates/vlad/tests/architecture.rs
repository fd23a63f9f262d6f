//! The crate dependency rules of docs/architecture.md: each stage depends only on the stages
//! before it. In particular the evaluator and the flow analysis are peers (neither depends on
//! the other), and the C backend depends on neither of them nor on the front end.

use std::collections::BTreeSet;
use std::path::Path;

/// Each crate and the vlad crates it may depend on (`None`: any).
const RULES: &[(&str, Option<&[&str]>)] = &[
    ("vlad-core", Some(&[])),
    ("vlad-syntax", Some(&["vlad-core"])),
    ("vlad-prelude", Some(&["vlad-core", "vlad-syntax"])),
    (
        "vlad-eval",
        Some(&["vlad-core", "vlad-syntax", "vlad-prelude"]),
    ),
    ("vlad-flow", Some(&["vlad-core"])),
    ("vlad-ir", Some(&["vlad-core"])),
    ("vlad-lower", Some(&["vlad-core", "vlad-flow", "vlad-ir"])),
    ("vlad-backend-c", Some(&["vlad-core", "vlad-ir"])),
    ("vlad-farfel", Some(&["vlad-core", "vlad-syntax"])),
    ("vlad-random", Some(&[])),
    ("vlad", None),
    ("vlad-cli", None),
];

/// The vlad crates in the `[dependencies]` section of a manifest (dev-dependencies aside).
fn vlad_dependencies(manifest: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut in_deps = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
            continue;
        }
        if !in_deps {
            continue;
        }
        let name: String = line
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '-' || *c == '_')
            .collect();
        if name == "vlad" || name.starts_with("vlad-") {
            out.insert(name);
        }
    }
    out
}

#[test]
fn every_crate_depends_only_on_the_stages_before_it() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut seen = BTreeSet::new();
    for entry in std::fs::read_dir(&crates).expect("the crates directory") {
        let dir = entry.expect("an entry").path();
        let Ok(manifest) = std::fs::read_to_string(dir.join("Cargo.toml")) else {
            continue;
        };
        let name = dir
            .file_name()
            .and_then(|n| n.to_str())
            .expect("a name")
            .to_string();
        let rule = RULES
            .iter()
            .find(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("the crate {name} has no rule in this test"));
        seen.insert(name.clone());
        let Some(allowed) = rule.1 else { continue };
        for dep in vlad_dependencies(&manifest) {
            assert!(
                allowed.contains(&dep.as_str()),
                "{name} depends on {dep}, which docs/architecture.md does not allow"
            );
        }
    }
    assert_eq!(
        seen.len(),
        RULES.len(),
        "a rule names a crate that does not exist"
    );
}

#[test]
fn the_manifest_reader_sees_dependencies_only() {
    let m =
        "[package]\nname = \"vlad-x\"\n[dependencies]\nvlad-core.workspace = true\nregex = \"1\"\n\
             vlad-ir = { path = \"../vlad-ir\" }\n[dev-dependencies]\nvlad-eval.workspace = true\n";
    let deps: Vec<String> = vlad_dependencies(m).into_iter().collect();
    assert_eq!(deps, ["vlad-core", "vlad-ir"]);
}
