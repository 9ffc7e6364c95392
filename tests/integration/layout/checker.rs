//! The checker itself, on synthetic trees: what makes an edge, at which
//! level, and how a cycle is spelled.

use super::graph::{check, graph, Crate};
use super::tokens::{scan, tokens};
use std::path::PathBuf;

/// A synthetic crate without a name: lib.rs is `lib`, then `files`.
fn tree(lib: &str, files: &[(&str, &str)]) -> Vec<Crate> {
    let files = std::iter::once(("lib.rs", lib))
        .chain(files.iter().copied())
        .map(|(p, t)| (PathBuf::from(p), t.to_string()))
        .collect();
    vec![Crate {
        name: String::new(),
        dir: PathBuf::new(),
        files,
    }]
}

/// Whether the graph of `crates` has the edge `from -> to`.
fn has_edge(crates: &[Crate], from: &str, to: &str) -> bool {
    graph(crates).get(from).is_some_and(|m| m.contains_key(to))
}

#[test]
fn a_cycle_of_three_modules_is_found_and_spelled_out() {
    let files = tree(
        "mod a; mod b; mod c;",
        &[
            ("a.rs", "use crate::b::X;"),
            ("b/mod.rs", "mod inner;"),
            ("b/inner.rs", "fn f() { crate::c::g(); }"),
            ("c.rs", "use crate::{a::Y, b};"),
        ],
    );
    let found = check(&files);
    assert_eq!(
        found,
        ["cycle among a, b, c:\n  a -> b (a.rs:1) -> c (b/inner.rs:1) -> a (c.rs:1)"],
        "{found:?}"
    );
}

#[test]
fn a_cycle_between_nested_siblings_is_found_at_their_level() {
    let files = tree(
        "mod net; mod log;",
        &[
            ("net/mod.rs", "mod tcp; mod udp;"),
            (
                "net/tcp.rs",
                "use crate::log::Line;\nuse super::udp::Socket;",
            ),
            ("net/udp/mod.rs", "mod assoc;"),
            (
                "net/udp/assoc.rs",
                "fn f() {\n    crate::net::tcp::pump();\n}",
            ),
            ("log.rs", "pub struct Line;"),
        ],
    );
    let found = check(&files);
    assert_eq!(
        found,
        ["cycle among net::tcp, net::udp:\n  net::tcp -> net::udp (net/tcp.rs:2) -> net::tcp (net/udp/assoc.rs:2)"],
        "{found:?}"
    );
    // The path to another top-level module is an edge at the top.
    assert!(has_edge(&files, "net", "log"), "{:?}", graph(&files));
    assert!(!has_edge(&files, "net::tcp", "log"), "{:?}", graph(&files));
}

#[test]
fn a_cycle_through_a_nested_reexport_is_found() {
    let files = tree(
        "mod stats;",
        &[
            (
                "stats/mod.rs",
                "mod counters; mod live;\npub use counters::Snapshot;\npub(crate) use live::{Rate as Speed};",
            ),
            ("stats/counters.rs", "fn f(_: super::Speed) {}"),
            ("stats/live.rs", "fn g(_: crate::stats::Snapshot) {}"),
        ],
    );
    let found = check(&files);
    assert_eq!(
        found,
        ["cycle among stats::counters, stats::live:\n  stats::counters -> stats::live (stats/counters.rs:1) -> stats::counters (stats/live.rs:1)"],
        "{found:?}"
    );
}

#[test]
fn a_cycle_through_a_crate_root_reexport_is_found() {
    let files = tree(
        "mod shared; mod stats;\npub use shared::{Settings, Shared as Everything};",
        &[
            ("shared.rs", "use crate::stats::Stats;"),
            ("stats/mod.rs", "mod rules;"),
            (
                "stats/rules.rs",
                "fn f() -> super::super::Everything { todo!() }",
            ),
        ],
    );
    assert_eq!(check(&files).len(), 1, "{:?}", graph(&files));
}

#[test]
fn parents_children_and_other_crates_make_no_edge() {
    let files = tree(
        "mod a; mod b;\npub use other_crate as c;",
        &[
            ("a/mod.rs", "mod x;\npub struct Item;\nfn f() { x::g(); }"),
            ("a/x.rs", "fn g(_: super::Item) { crate::c::h(); }"),
            ("b.rs", "fn h() { c::a::f(); oi_config::a::f(); }"),
        ],
    );
    let edges = graph(&files);
    assert!(edges.is_empty(), "{edges:?}");
}

#[test]
fn plain_paths_start_at_the_modules_own_children_imports_and_globs() {
    let files = tree(
        "mod a;",
        &[
            ("a/mod.rs", "mod io; mod x; mod y;\n#[cfg(test)]\nmod tests {\n    use super::*;\n    fn t() { y::f(); }\n}"),
            // `io` here is std's: a module's own name wins.
            ("a/x.rs", "use std::io;\nfn f() { io::stdout(); }"),
            ("a/io.rs", "fn f() { x::g(); }"),
            ("a/y.rs", "use super::io as wire;\nfn f() {\n    wire::read();\n}"),
        ],
    );
    let edges = graph(&files);
    assert!(!has_edge(&files, "a::x", "a::io"), "{edges:?}");
    assert!(!has_edge(&files, "a::io", "a::x"), "{edges:?}");
    assert_eq!(edges["a::y"]["a::io"], "a/y.rs:1", "{edges:?}");
    assert_eq!(edges["a::tests"]["a::y"], "a/mod.rs:5", "{edges:?}");
}

#[test]
fn unit_tests_super_self_and_macros_count_and_comments_and_strings_do_not() {
    let files = tree(
        "mod a; mod b; mod c; mod d;",
        &[
            ("a.rs", "#[cfg(test)]\nmod tests {\n    use super::super::b::f;\n}\n"),
            ("b.rs", "macro_rules! m { () => { $crate::a::x() } }"),
            ("c.rs", "// crate::d::x\n/* crate::d::y */ const S: &str = \"crate::d::z\";\nconst R: &str = r#\"crate::d\"#; const C: char = '\"'; fn f<'a>() {}"),
            ("d.rs", "pub(crate) fn x() { self::y(); } use crate::c;"),
        ],
    );
    let edges = graph(&files);
    assert_eq!(check(&files).len(), 1, "a <-> b: {edges:?}");
    assert!(!has_edge(&files, "c", "d"), "{edges:?}");
    assert!(has_edge(&files, "d", "c"), "{edges:?}");
}

#[test]
fn grouped_and_nested_uses_yield_every_leaf_and_imports() {
    let s = scan(&tokens(
        "use crate::{a, b::{self, c, d::E as F}, g::*};\nfn f() { h::i(); x.j::<u8>(); }",
    ));
    let leaves: Vec<String> = s.refs.iter().map(|p| p.segments.join("::")).collect();
    assert_eq!(
        leaves,
        [
            "crate::a",
            "crate::b",
            "crate::b::c",
            "crate::b::d::E",
            "crate::g",
            "h::i"
        ]
    );
    let names: Vec<Option<&str>> = s.imports.iter().map(|i| i.name.as_deref()).collect();
    assert_eq!(names, [Some("a"), Some("b"), Some("c"), Some("F"), None]);
}
