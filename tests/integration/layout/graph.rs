//! The module graph of a workspace's crates, and its cycles.
//!
//! Edges join siblings: a path written in module `a::b::x` that leads to
//! `a::c::y` is the edge `a::b -> a::c`, at the level of the two modules'
//! longest common prefix, so a cycle among the children of any module, at
//! any depth, is a cycle of this graph. A path to an ancestor or a
//! descendant (`super::Item` defined in the parent, `child::f()`) is no
//! edge: a parent and its children are one concern in several files, and a
//! cycle through a parent's own items is not a cycle between modules. A
//! path into another crate (`oi_config::..`, or a crate the root re-exports
//! under a module's name) is no edge either: cargo keeps crates acyclic.

use super::tokens::{scan, tokens, Scan};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One crate's sources.
pub struct Crate {
    /// Its name as other crates write it (`oi_config`): the first segment of
    /// each of its modules in messages; `""` shows bare module paths.
    pub name: String,
    /// Its `src/` directory as messages show it (`crates/config/src`).
    pub dir: PathBuf,
    /// Each file: its path under `dir`, and its text.
    pub files: Vec<(PathBuf, String)>,
}

/// A module path within its crate: `["parse", "options"]`; the root is `[]`.
type Module = Vec<String>;

/// The module path of a file under `src/`: `stats/rules.rs` is
/// `["stats", "rules"]`, `stats/mod.rs` is `["stats"]`, `lib.rs` is `[]`.
pub fn module_of(rel: &Path) -> Module {
    let mut parts: Module = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.last().is_some_and(|l| l == "mod" || l == "lib") {
        parts.pop();
    }
    parts
}

/// `a` followed by `b`.
fn joined(a: &[String], b: &[String]) -> Module {
    a.iter().chain(b).cloned().collect()
}

/// How many `use`s one path is followed through (a re-export of a
/// re-export, ...): more than any real chain, and it ends a `use` that
/// names itself.
const MAX_HOPS: usize = 8;

/// What resolving a path needs of one crate: its modules, and what each
/// module's `use`s name.
#[derive(Default)]
struct Tree {
    /// Every module: each file's, their ancestors, and the inline ones.
    modules: BTreeSet<Module>,
    /// Module -> a name its `use`s bring in -> the path it stands for.
    imports: BTreeMap<Module, BTreeMap<String, Vec<String>>>,
    /// Module -> the paths of the modules its glob `use`s open.
    globs: BTreeMap<Module, Vec<Vec<String>>>,
}

impl Tree {
    /// The tree of files already scanned: (module, scan) pairs.
    fn of(scanned: &[(PathBuf, Module, Scan)]) -> Tree {
        let mut tree = Tree::default();
        for (_, module, scan) in scanned {
            for k in 0..=module.len() {
                tree.modules.insert(module[..k].to_vec());
            }
            for inline in &scan.inline_mods {
                tree.modules.insert(joined(module, inline));
            }
            for import in &scan.imports {
                let at = joined(module, &import.inline);
                match &import.name {
                    Some(name) => {
                        let names = tree.imports.entry(at).or_default();
                        names.insert(name.clone(), import.segments.clone());
                    }
                    None => tree
                        .globs
                        .entry(at)
                        .or_default()
                        .push(import.segments.clone()),
                }
            }
        }
        tree
    }

    /// Whether `name` in `module` is a child module or an imported name.
    fn has(&self, module: &[String], name: &str) -> bool {
        let child = joined(module, &[name.to_string()]);
        self.modules.contains(&child)
            || self
                .imports
                .get(module)
                .is_some_and(|m| m.contains_key(name))
    }

    /// The module a path written in module `at` leads to: the deepest one
    /// it names or whose item it names, following `use`s (a parent's
    /// `pub use child::Item` leads into `child`); `None` when it leaves the
    /// crate (`std::`, `oi_wire::`, `crate::config` re-exporting a crate) or
    /// starts with a name the module does not have.
    fn resolve(&self, at: &[String], segments: &[String], hops: usize) -> Option<Module> {
        if hops > MAX_HOPS {
            return None;
        }
        let (first, mut rest) = segments.split_first()?;
        let mut here: Module = at.to_vec();
        match first.as_str() {
            "crate" => here.clear(),
            "self" => {}
            "super" => {
                here.pop()?;
                while let Some((_, tail)) = rest.split_first().filter(|(s, _)| *s == "super") {
                    here.pop()?;
                    rest = tail;
                }
            }
            _ => {
                // A plain path starts at a name of this module, else at one
                // a glob `use` (`use super::*`) brings in.
                let globbed = self.globs.get(at).into_iter().flatten();
                let opened = globbed.filter_map(|g| self.resolve(at, g, hops + 1));
                let scope = std::iter::once(here)
                    .chain(opened)
                    .find(|m| self.has(m, first))?;
                return self.walk(scope, segments, hops);
            }
        }
        self.walk(here, rest, hops)
    }

    /// From module `here`, down the child modules `rest` names, then
    /// through a `use` of the module where the children end.
    fn walk(&self, mut here: Module, mut rest: &[String], hops: usize) -> Option<Module> {
        while let Some((name, tail)) = rest.split_first() {
            let child = joined(&here, std::slice::from_ref(name));
            if self.modules.contains(&child) {
                here = child;
                rest = tail;
            } else if let Some(target) = self.imports.get(&here).and_then(|m| m.get(name)) {
                return self.resolve(&here, &joined(target, tail), hops + 1);
            } else {
                break;
            }
        }
        Some(here)
    }
}

/// The edges of the graph: module -> module it refers to -> the first
/// `file:line` doing so. Modules are named `crate::a::b`.
pub type Edges = BTreeMap<String, BTreeMap<String, String>>;

/// A module's name in messages: `oi_config::parse`, or `parse` in a crate
/// without a name.
fn label(krate: &str, module: &[String]) -> String {
    let path = module.join("::");
    if krate.is_empty() {
        path
    } else {
        format!("{krate}::{path}")
    }
}

/// The module graph of `crates`.
pub fn graph(crates: &[Crate]) -> Edges {
    let mut edges: Edges = BTreeMap::new();
    for krate in crates {
        // A binary's root (`main.rs`, `bin/`) is a crate of its own that
        // uses this one from outside.
        let scanned: Vec<(PathBuf, Module, Scan)> = krate
            .files
            .iter()
            .map(|(rel, text)| (rel.clone(), module_of(rel), scan(&tokens(text))))
            .filter(|(_, m, _)| !m.first().is_some_and(|f| f == "main" || f == "bin"))
            .collect();
        let tree = Tree::of(&scanned);
        for (rel, module, scan) in &scanned {
            for r in &scan.refs {
                let at = joined(module, &r.inline);
                let Some(to) = tree.resolve(&at, &r.segments, 0) else {
                    continue;
                };
                let common = at.iter().zip(&to).take_while(|(a, b)| a == b).count();
                if common == at.len() || common == to.len() {
                    continue;
                }
                let place = || format!("{}:{}", krate.dir.join(rel).display(), r.line);
                edges
                    .entry(label(&krate.name, &at[..=common]))
                    .or_default()
                    .entry(label(&krate.name, &to[..=common]))
                    .or_insert_with(place);
            }
        }
    }
    edges
}

/// The cycles of `crates`, each spelled out.
pub fn check(crates: &[Crate]) -> Vec<String> {
    let edges = graph(crates);
    cycles(&edges).iter().map(|c| spell(&edges, c)).collect()
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

/// The component `scc` spelled out: its members, then a shortest cycle
/// through each member no cycle before it passed through, each step with
/// its place: `a -> b (a.rs:3) -> a (b/mod.rs:9)`.
fn spell(edges: &Edges, scc: &[String]) -> String {
    let mut covered = BTreeSet::new();
    let mut text = format!("cycle among {}:", scc.join(", "));
    for start in scc {
        if covered.contains(start) {
            continue;
        }
        let chain = shortest_cycle(edges, scc, start);
        covered.extend(chain.iter().cloned());
        text.push_str("\n  ");
        text.push_str(&chain[0]);
        for pair in chain.windows(2) {
            let at = &edges[&pair[0]][&pair[1]];
            text.push_str(&format!(" -> {} ({at})", pair[1]));
        }
    }
    text
}

/// A shortest cycle from `start` back to it within the component `scc`,
/// `start` first and last.
fn shortest_cycle(edges: &Edges, scc: &[String], start: &String) -> Vec<String> {
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
    std::iter::once(start.clone())
        .chain(back)
        .chain(std::iter::once(start.clone()))
        .collect()
}
