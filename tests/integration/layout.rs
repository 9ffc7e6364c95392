//! The layout rule ARCHITECTURE.md states: data flows one way, so the
//! top-level modules of `src/` (config, listen, route, tcp, ...) import each
//! other without a cycle, of any length, unit-test code included.
//!
//! Checked on the source text, tokenised (comments, strings and char
//! literals removed), so it sees every path however it is written:
//! `crate::a::b`, `$crate::a`, `super::` and `self::` (resolved against the
//! file's module and any inline `mod x { .. }` around it), grouped
//! `use crate::{a, b::{c, d}}`, paths inside function bodies and
//! `#[cfg(test)]` modules, and names the crate root re-exports
//! (`crate::Shared` is `shared`'s, through lib.rs's `pub use`). A cycle fails
//! the test spelled out, each step with the file and line that makes it.
//!
//! Not seen (none is used in `src/`): `#[path]` attributes, and globs of the
//! crate root (`use crate::*`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A token: an identifier (keywords included), `::`, or one other character.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    /// An identifier or keyword (`$crate` is `crate`).
    Ident(String),
    /// `::`
    Sep,
    /// Any other character outside comments and literals.
    Punct(char),
}

/// Tokens of Rust source with their line numbers; comments, string, byte
/// string, raw string and char literals are dropped (lifetimes are kept as
/// an identifier after a `'`, which no path rule matches).
fn tokens(src: &str) -> Vec<(Tok, usize)> {
    let c: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    // Skips to just past the closing `"` of a plain string starting at `i`.
    let skip_string = |mut i: usize, line: &mut usize| {
        i += 1;
        while i < c.len() && c[i] != '"' {
            if c[i] == '\\' {
                i += 1;
            }
            if c.get(i) == Some(&'\n') {
                *line += 1;
            }
            i += 1;
        }
        i + 1
    };
    while i < c.len() {
        let ch = c[i];
        let next = c.get(i + 1).copied();
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if c[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if ch == '"' {
            i = skip_string(i, &mut line);
        } else if (ch == 'r' || (ch == 'b' && next == Some('r')))
            && c[i + usize::from(ch == 'b') + 1..]
                .iter()
                .take_while(|&&x| x == '#')
                .count()
                .checked_add(i + usize::from(ch == 'b') + 1)
                .is_some_and(|q| c.get(q) == Some(&'"'))
            && !(i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_'))
        {
            // r"..", r#".."#, br#".."#: ends at `"` and as many `#`.
            let start = i + usize::from(ch == 'b') + 1;
            let hashes = c[start..].iter().take_while(|&&x| x == '#').count();
            i = start + hashes + 1;
            while i < c.len() {
                if c[i] == '"'
                    && c[i + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|&&x| x == '#')
                        .count()
                        == hashes
                {
                    i += 1 + hashes;
                    break;
                }
                if c[i] == '\n' {
                    line += 1;
                }
                i += 1;
            }
        } else if ch == 'b' && next == Some('"') {
            i = skip_string(i + 1, &mut line);
        } else if ch == '\'' {
            // A char literal ('x', '\n', '\u{1F600}') or a lifetime ('a).
            if next == Some('\\') {
                i += 2;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
            }
        } else if ch == ':' && next == Some(':') {
            out.push((Tok::Sep, line));
            i += 2;
        } else if ch.is_alphabetic()
            || ch == '_'
            || (ch == '$' && next.is_some_and(char::is_alphabetic))
        {
            let start = i;
            i += 1;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            let word = if word == "$crate" {
                "crate".to_string()
            } else {
                word
            };
            out.push((Tok::Ident(word), line));
        } else if ch.is_whitespace() {
            i += 1;
        } else {
            out.push((Tok::Punct(ch), line));
            i += 1;
        }
    }
    out
}

/// One path written in the source: its segments (a leading `crate`, `self`
/// or `super`s included), and the line it starts on.
#[derive(Clone, Debug)]
struct PathRef {
    /// `["crate", "stats", "Snapshot"]`, `["super", "super", "Shared"]`, ...
    segments: Vec<String>,
    /// The line it starts on.
    line: usize,
    /// The inline modules it is written inside (`mod tests { .. }`), outermost first.
    inline: Vec<String>,
}

/// The paths starting with `crate`, `self` or `super` in `toks`; a group
/// (`a::{b, c::{d}}`) yields one path per leaf. Also tracks inline modules,
/// so `super` inside `mod tests { .. }` is resolved from there.
fn paths(toks: &[(Tok, usize)]) -> Vec<PathRef> {
    let mut out = Vec::new();
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    let ident = |i: usize| match toks.get(i) {
        Some((Tok::Ident(s), _)) => Some(s.as_str()),
        _ => None,
    };
    while i < toks.len() {
        match &toks[i].0 {
            Tok::Punct('{') => {
                depth += 1;
                i += 1;
            }
            Tok::Punct('}') => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
            }
            Tok::Ident(w)
                if w == "mod" && toks.get(i + 2).map(|t| &t.0) == Some(&Tok::Punct('{')) =>
            {
                if let Some(name) = ident(i + 1) {
                    inline.push((name.to_string(), depth + 1));
                }
                i += 1;
            }
            Tok::Ident(w) if ["crate", "self", "super"].contains(&w.as_str()) => {
                // Not a path when it follows `::` (`a::self`) or is `pub(crate)`.
                let after_sep = i > 0 && toks[i - 1].0 == Tok::Sep;
                let in_vis = i > 0
                    && toks[i - 1].0 == Tok::Punct('(')
                    && toks.get(i + 1).map(|t| &t.0) == Some(&Tok::Punct(')'));
                if after_sep || in_vis {
                    i += 1;
                    continue;
                }
                let names: Vec<String> = inline.iter().map(|(n, _)| n.clone()).collect();
                let line = toks[i].1;
                i = path_at(toks, i, Vec::new(), &mut |segments, _| {
                    out.push(PathRef {
                        segments,
                        line,
                        inline: names.clone(),
                    })
                });
            }
            _ => i += 1,
        }
    }
    out
}

/// Reads the path starting at `i` (after `prefix`), calling `found` for each
/// leaf with its `as` alias if any; returns the index after it.
fn path_at(
    toks: &[(Tok, usize)],
    mut i: usize,
    mut segments: Vec<String>,
    found: &mut dyn FnMut(Vec<String>, Option<String>),
) -> usize {
    let at = |i: usize| toks.get(i).map(|t| &t.0);
    loop {
        match at(i) {
            Some(Tok::Ident(w)) => {
                segments.push(w.clone());
                i += 1;
            }
            Some(Tok::Punct('*')) => {
                // A glob: the path so far.
                found(segments, None);
                return i + 1;
            }
            Some(Tok::Punct('{')) => {
                // A group: each element is a path with these segments before it.
                i += 1;
                loop {
                    match at(i) {
                        Some(Tok::Punct('}')) => return i + 1,
                        Some(Tok::Punct(',')) => i += 1,
                        Some(_) => i = path_at(toks, i, segments.clone(), found),
                        None => return i,
                    }
                }
            }
            _ => {
                found(segments, None);
                return i;
            }
        }
        if at(i) == Some(&Tok::Sep) {
            i += 1;
            continue;
        }
        // The leaf, and its alias: `X as Y`.
        if let (Some(Tok::Ident(a)), Some(Tok::Ident(alias))) = (at(i), at(i + 1)) {
            if a == "as" {
                found(segments, Some(alias.clone()));
                return i + 2;
            }
        }
        found(segments, None);
        return i;
    }
}

/// The module path of a file under `src/`: `stats/rules.rs` is
/// `["stats", "rules"]`, `stats/mod.rs` is `["stats"]`, `lib.rs` is `[]`.
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.last().is_some_and(|l| l == "mod" || l == "lib") {
        parts.pop();
    }
    parts
}

/// Where a crate-root name leads: the top-level module it is or that the
/// crate root re-exports it from (lib.rs's `pub use shared::Shared`).
#[derive(Default)]
struct Root {
    /// The top-level modules (`mod x;` in lib.rs).
    modules: BTreeSet<String>,
    /// Re-exported name -> the top-level module it comes from.
    reexports: BTreeMap<String, String>,
}

impl Root {
    /// Reads lib.rs.
    fn of(lib: &str) -> Root {
        let toks = tokens(lib);
        let mut root = Root::default();
        for (i, t) in toks.iter().enumerate() {
            if t.0 == Tok::Ident("mod".into()) {
                if let Some((Tok::Ident(name), _)) = toks.get(i + 1) {
                    root.modules.insert(name.clone());
                }
            }
        }
        // `use a::b::C;`, `use a::{B, C as D};`, `use crate::a::B;`
        let mut i = 0;
        while i < toks.len() {
            if toks[i].0 == Tok::Ident("use".into()) {
                let mut leaves = Vec::new();
                i = path_at(&toks, i + 1, Vec::new(), &mut |s, alias| {
                    leaves.push((s, alias))
                });
                for (segs, alias) in leaves {
                    let segs: Vec<&String> =
                        segs.iter().filter(|s| s.as_str() != "crate").collect();
                    let (Some(first), Some(last)) = (segs.first(), segs.last()) else {
                        continue;
                    };
                    let name = alias.unwrap_or_else(|| (*last).clone());
                    root.reexports.insert(name, (*first).clone());
                }
            }
            i += 1;
        }
        root.reexports.retain(|_, m| root.modules.contains(m));
        root
    }

    /// The top-level module a path from the crate root's items leads to.
    fn module(&self, first: &str) -> Option<String> {
        if self.modules.contains(first) {
            Some(first.to_string())
        } else {
            self.reexports.get(first).cloned()
        }
    }
}

/// The top-level module `p`, written in the file of module `file_mod`,
/// refers to; `None` when it stays inside the crate root without naming a module.
fn resolve(p: &PathRef, file_mod: &[String], root: &Root) -> Option<String> {
    let mut here: Vec<String> = file_mod.iter().chain(&p.inline).cloned().collect();
    let mut segs = p.segments.iter().peekable();
    match segs.peek().map(|s| s.as_str()) {
        Some("crate") => {
            segs.next();
            here.clear();
        }
        Some("self") => {
            segs.next();
        }
        Some("super") => {
            while segs.peek().is_some_and(|s| *s == "super") {
                segs.next();
                here.pop();
            }
        }
        _ => {}
    }
    match here.first() {
        Some(top) => Some(top.clone()),
        None => segs.next().and_then(|first| root.module(first)),
    }
}

/// An edge of the module graph, with the place that makes it.
type Edges = BTreeMap<String, BTreeMap<String, String>>;

/// The module graph of a source tree given as (path under `src/`, text):
/// top-level module -> module it refers to -> first `file:line` doing so.
fn graph(files: &[(PathBuf, String)]) -> Edges {
    let lib = files
        .iter()
        .find(|(p, _)| p == Path::new("lib.rs"))
        .map(|(_, t)| t.as_str())
        .unwrap_or("");
    let root = Root::of(lib);
    let mut edges: Edges = BTreeMap::new();
    for (rel, text) in files {
        let module = module_of(rel);
        // The crate roots: their `use`s are the re-exports read above.
        let Some(top) = module.first() else { continue };
        if top == "main" {
            continue;
        }
        for p in paths(&tokens(text)) {
            if let Some(to) = resolve(&p, &module, &root) {
                if to != *top {
                    edges
                        .entry(top.clone())
                        .or_default()
                        .entry(to)
                        .or_insert_with(|| format!("{}:{}", rel.display(), p.line));
                }
            }
        }
    }
    edges
}

/// Strongly connected components of more than one module (Tarjan), each sorted.
fn cycles(edges: &Edges) -> Vec<Vec<String>> {
    /// Tarjan's bookkeeping.
    struct State<'a> {
        /// The graph.
        edges: &'a Edges,
        /// The order each module was first visited in.
        index: BTreeMap<&'a str, usize>,
        /// The lowest index reachable from each module through the stack.
        low: BTreeMap<&'a str, usize>,
        /// Modules visited whose component is not yet complete.
        stack: Vec<&'a str>,
        /// The members of `stack`, for lookup.
        on_stack: BTreeSet<&'a str>,
        /// The next visit's index.
        next: usize,
        /// Components of more than one module found so far.
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.edges.get(v).into_iter().flat_map(|m| m.keys()) {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low[v];
                s.low.insert(v, lv.min(lw));
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low[v];
                s.low.insert(v, lv.min(iw));
            }
        }
        if s.low[v] == s.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                scc.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                scc.sort();
                s.found.push(scc);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    let nodes: BTreeSet<&str> = edges
        .iter()
        .flat_map(|(a, m)| std::iter::once(a.as_str()).chain(m.keys().map(String::as_str)))
        .collect();
    for v in nodes {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.found
}

/// One cycle through the component `scc`, spelled out with the place of
/// each step: `a -> b (a.rs:3) -> a (b/mod.rs:9)`.
fn spell(edges: &Edges, scc: &[String]) -> String {
    let start = &scc[0];
    // Breadth-first from `start` within the component, back to `start`.
    let mut prev: BTreeMap<&String, &String> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    let mut last = None;
    while let Some(v) = queue.pop_front() {
        for w in edges.get(v).into_iter().flat_map(|m| m.keys()) {
            if !scc.contains(w) {
                continue;
            }
            if w == start {
                last = Some(v);
                queue.clear();
                break;
            }
            if !prev.contains_key(w) {
                prev.insert(w, v);
                queue.push_back(w);
            }
        }
    }
    // Back from the member that closes the cycle to the start's successor.
    let mut back = Vec::new();
    let mut v = last.expect("a component has a cycle through each member");
    while v != start {
        back.push(v.clone());
        v = prev[v];
    }
    back.reverse();
    let chain: Vec<String> = std::iter::once(start.clone())
        .chain(back)
        .chain(std::iter::once(start.clone()))
        .collect();
    let mut text = chain[0].clone();
    for pair in chain.windows(2) {
        let at = &edges[&pair[0]][&pair[1]];
        text.push_str(&format!(" -> {} ({at})", pair[1]));
    }
    text
}

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

/// The cycles of a source tree, spelled out.
fn check(files: &[(PathBuf, String)]) -> Vec<String> {
    let edges = graph(files);
    cycles(&edges).iter().map(|c| spell(&edges, c)).collect()
}

#[test]
fn the_top_level_modules_import_each_other_without_a_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    let files: Vec<(PathBuf, String)> = paths
        .iter()
        .map(|p| {
            let rel = p.strip_prefix(&src).expect("under src").to_path_buf();
            (rel, std::fs::read_to_string(p).expect("read source"))
        })
        .collect();
    assert!(files.len() > 50, "found the sources");
    let edges = graph(&files);
    assert!(
        edges.get("tcp").is_some_and(|m| m.contains_key("stats")),
        "the graph sees tcp's use of stats: {edges:?}"
    );
    let found = check(&files);
    assert!(
        found.is_empty(),
        "import cycles between modules of src/:\n{}",
        found.join("\n")
    );
}

/// A synthetic tree: lib.rs declaring `mods` plus `files`.
fn tree(lib: &str, files: &[(&str, &str)]) -> Vec<(PathBuf, String)> {
    std::iter::once(("lib.rs", lib))
        .chain(files.iter().copied())
        .map(|(p, t)| (PathBuf::from(p), t.to_string()))
        .collect()
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
        ["a -> b (a.rs:1) -> c (b/inner.rs:1) -> a (c.rs:1)"],
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
    assert!(
        !edges.get("c").is_some_and(|m| m.contains_key("d")),
        "{edges:?}"
    );
    assert!(edges["d"].contains_key("c"), "{edges:?}");
}

#[test]
fn grouped_and_nested_uses_yield_every_leaf() {
    let toks = tokens("use crate::{a, b::{c, d::E as F}, g::*};");
    let leaves: Vec<String> = paths(&toks).iter().map(|p| p.segments.join("::")).collect();
    assert_eq!(
        leaves,
        ["crate::a", "crate::b::c", "crate::b::d::E", "crate::g"]
    );
}
