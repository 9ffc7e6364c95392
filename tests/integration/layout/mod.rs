//! The layout rules ARCHITECTURE.md states, checked on the workspace's
//! source text.
//!
//! Data flows one way: in every crate (`src/` and `crates/*/src/`), the
//! children of each module import each other without a cycle of any
//! length, unit-test code included. `graph.rs` builds the graph (a path
//! from `a::b::x` to `a::c::y` is the edge `a::b -> a::c`) from the tokens
//! `tokens.rs` reads (comments, strings and char literals removed), so it
//! sees every path however it is written: `crate::a::b`, `$crate::a`,
//! `super::` and `self::` (resolved against the file's module and any
//! inline `mod x { .. }` around it), plain `child::f()`, grouped
//! `use crate::{a, b::{c, d}}`, paths inside function bodies and
//! `#[cfg(test)]` modules, and names any module re-exports (`crate::Shared`
//! is `shared`'s through lib.rs's `pub use`, `super::SETTINGS` in
//! `settings/applies.rs` is `settings/table.rs`'s through `settings.rs`'s).
//! A cycle fails the test with its modules and a shortest cycle through
//! each, every step with the file and line that makes it.
//!
//! And files stay small: none under a `src/` is over [`MAX_LINES`] lines
//! but the data tables [`DATA_TABLES`] names, and for now the files
//! [`STILL_TO_SPLIT`] names.
//!
//! Not seen (none is used): `#[path]` attributes, a name reached only
//! through a glob re-export (`pub use x::*`, then `m::Name`), and a `use`
//! inside a function body that shadows a child module of the same name.

mod checker;
mod graph;
mod tokens;

use graph::{check, graph, Crate};
use std::path::{Path, PathBuf};

/// Longest file under a `src/` directory, in lines: past it a file holds
/// more than one concern, or one that wants modules of its own.
const MAX_LINES: usize = 700;

/// Files past [`MAX_LINES`] that are data, not logic: one entry per
/// setting, read as a table.
const DATA_TABLES: &[&str] = &["crates/config/src/settings/table.rs"];

/// Temporary: files past [`MAX_LINES`] whose split into modules is under
/// way. Each comes off as its split lands: a file listed here that is no
/// longer too long fails the test, so the list cannot outlive the splits.
const STILL_TO_SPLIT: &[&str] = &["crates/runtime/src/reactor/mod.rs"];

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The package name a `Cargo.toml` gives, as code writes it (`oi_config`).
fn package_name(manifest: &Path) -> String {
    let text = std::fs::read_to_string(manifest).expect("read Cargo.toml");
    let name = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("name = \""))
        .and_then(|rest| rest.strip_suffix('"'))
        .unwrap_or_else(|| panic!("no package name in {}", manifest.display()));
    name.replace('-', "_")
}

/// Every crate of the workspace: the root package's `src/` and each
/// `crates/*/src/`, with its files.
fn workspace() -> Vec<Crate> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut dirs = vec![PathBuf::from("src")];
    let mut members: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .expect("read crates/")
        .flatten()
        .map(|e| Path::new("crates").join(e.file_name()).join("src"))
        .filter(|d| root.join(d).is_dir())
        .collect();
    members.sort();
    dirs.extend(members);
    dirs.into_iter()
        .map(|dir| {
            let src = root.join(&dir);
            let mut paths = Vec::new();
            rust_files(&src, &mut paths);
            paths.sort();
            let files = paths
                .iter()
                .map(|p| {
                    let rel = p.strip_prefix(&src).expect("under src").to_path_buf();
                    (rel, std::fs::read_to_string(p).expect("read source"))
                })
                .collect();
            let manifest = src.parent().expect("a package").join("Cargo.toml");
            Crate {
                name: package_name(&manifest),
                dir,
                files,
            }
        })
        .collect()
}

#[test]
fn the_modules_of_every_crate_import_each_other_without_a_cycle() {
    let crates = workspace();
    let names: Vec<&str> = crates.iter().map(|c| c.name.as_str()).collect();
    for expected in ["oxidinetd", "oi_config", "oi_runtime", "oi_wire"] {
        assert!(names.contains(&expected), "found {expected}: {names:?}");
    }
    assert!(
        crates.iter().map(|c| c.files.len()).sum::<usize>() > 100,
        "found the sources"
    );
    let edges = graph(&crates);
    // One edge between top-level modules, one between nested siblings
    // through a re-export, to show the graph is not empty by mistake.
    for (from, to) in [
        ("oxidinetd::tcp", "oxidinetd::stats"),
        ("oi_config::settings::applies", "oi_config::settings::table"),
    ] {
        assert!(
            edges.get(from).is_some_and(|m| m.contains_key(to)),
            "the graph sees {from} -> {to}: {edges:#?}"
        );
    }
    let found = check(&crates);
    assert!(
        found.is_empty(),
        "import cycles between sibling modules:\n{}",
        found.join("\n")
    );
}

#[test]
fn no_source_file_is_over_700_lines_but_the_data_tables() {
    let crates = workspace();
    let mut over = Vec::new();
    let mut lengths = std::collections::BTreeMap::new();
    for krate in &crates {
        for (rel, text) in &krate.files {
            let shown = krate.dir.join(rel).display().to_string();
            let lines = text.lines().count();
            lengths.insert(shown.clone(), lines);
            let allowed =
                DATA_TABLES.contains(&shown.as_str()) || STILL_TO_SPLIT.contains(&shown.as_str());
            if lines > MAX_LINES && !allowed {
                over.push(format!("{shown}: {lines} lines"));
            }
        }
    }
    assert!(
        over.is_empty(),
        "files over {MAX_LINES} lines (split each into modules of its concerns):\n{}",
        over.join("\n")
    );
    for listed in DATA_TABLES.iter().chain(STILL_TO_SPLIT) {
        assert!(lengths.contains_key(*listed), "{listed} is listed but gone");
    }
    for listed in STILL_TO_SPLIT {
        let lines = lengths[*listed];
        assert!(
            lines > MAX_LINES,
            "{listed} is {lines} lines now: take it off STILL_TO_SPLIT"
        );
    }
}

/// The workspace's own crates a manifest depends on (`path = "..."`
/// dependencies, dev-dependencies included), by package name.
fn path_dependencies(manifest: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(manifest).expect("read a Cargo.toml");
    let mut deps: Vec<String> = text
        .lines()
        .filter(|l| l.contains("path = \"") && !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once('=').map(|(name, _)| name.trim().to_string()))
        .filter(|name| name != "path")
        .collect();
    deps.sort();
    deps
}

/// The crate graph is the architecture, one way: the runtime and the
/// codecs depend on nothing of oi's, the configuration on the codecs only
/// (server-name patterns), the daemon on all three, and the fuzz targets on
/// the codecs and the configuration only — never on the daemon.
#[test]
fn the_crate_graph_is_the_architecture() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let expected: &[(&str, &[&str])] = &[
        ("crates/runtime/Cargo.toml", &[]),
        ("crates/wire/Cargo.toml", &[]),
        ("crates/config/Cargo.toml", &["oi-wire"]),
        ("Cargo.toml", &["oi-config", "oi-runtime", "oi-wire"]),
        ("fuzz/Cargo.toml", &["oi-config", "oi-wire"]),
    ];
    for (manifest, deps) in expected {
        assert_eq!(
            path_dependencies(&root.join(manifest)),
            *deps,
            "{manifest}'s dependencies on the workspace's crates"
        );
    }
    // Every crate of the workspace is in the list above.
    let crates: Vec<String> = std::fs::read_dir(root.join("crates"))
        .expect("crates/")
        .flatten()
        .map(|e| format!("crates/{}/Cargo.toml", e.file_name().to_string_lossy()))
        .collect();
    for c in &crates {
        assert!(
            expected.iter().any(|(m, _)| m == c),
            "{c} is a crate the crate graph test does not know: add it with its allowed dependencies"
        );
    }
}
