//! The layout rule ARCHITECTURE.md states: data flows one way, so no two
//! top-level modules of `src/` refer to each other (`crate::a` in b and
//! `crate::b` in a). Checked on the source text, so a change that breaks it
//! fails here with the pair named.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Every `.rs` file under `dir`, recursively (bounded by the tree's size).
fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
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

/// The top-level module names `text` refers to as `crate::name`, comments excluded.
fn crate_refs(text: &str) -> BTreeSet<String> {
    let mut refs = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            rest = &rest[i + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            if !name.is_empty() {
                refs.insert(name);
            }
        }
    }
    refs
}

#[test]
fn no_two_modules_import_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(files.len() > 10, "found the sources");
    let mut deps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let rel = f.strip_prefix(&src).expect("under src");
        let top = rel
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .unwrap_or("")
            .trim_end_matches(".rs")
            .to_string();
        if top == "lib" || top == "main" {
            continue;
        }
        let text = std::fs::read_to_string(f).expect("read source");
        let entry = deps.entry(top.clone()).or_default();
        entry.extend(crate_refs(&text).into_iter().filter(|d| *d != top));
    }
    let mut cycles = Vec::new();
    for (a, uses) in &deps {
        for b in uses {
            if a < b && deps.get(b).is_some_and(|back| back.contains(a)) {
                cycles.push(format!("{a} <-> {b}"));
            }
        }
    }
    assert!(
        cycles.is_empty(),
        "modules importing each other: {cycles:?}"
    );
}
