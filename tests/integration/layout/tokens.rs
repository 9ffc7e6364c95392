//! Rust source as the layout checker reads it: tokens without comments and
//! literals, then every path the text writes (`crate::a::b`, `super::x`,
//! `x::y`, each leaf of a grouped `use`), and the names each module imports
//! (`use a::B;`, `pub use b::{C as D, *};`), which later paths may go through.

/// A token: an identifier (keywords included), `::`, or one other character.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tok {
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
pub fn tokens(src: &str) -> Vec<(Tok, usize)> {
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
/// or `super`s included), where, and inside which inline modules.
#[derive(Clone, Debug)]
pub struct PathRef {
    /// `["crate", "stats", "Snapshot"]`, `["super", "super", "Shared"]`, ...
    pub segments: Vec<String>,
    /// The line of its last segment (a grouped `use` spans lines).
    pub line: usize,
    /// The inline modules it is written inside (`mod tests { .. }`),
    /// outermost first: its module is the file's plus these.
    pub inline: Vec<String>,
}

/// A module-level `use`: a name the module then has, or a glob.
#[derive(Clone, Debug)]
pub struct Import {
    /// The inline modules it is written in, outermost first.
    pub inline: Vec<String>,
    /// The name it brings in (the alias, else the last segment); `None`
    /// for a glob (`use super::*`), which brings in whatever is there.
    pub name: Option<String>,
    /// What it names, as written (a glob's: the module).
    pub segments: Vec<String>,
}

/// What one file says about modules: its paths, its imports, its inline
/// modules.
#[derive(Debug, Default)]
pub struct Scan {
    /// Every path written, in order.
    pub refs: Vec<PathRef>,
    /// The `use` items at module level (not those inside function bodies,
    /// which no other module can name).
    pub imports: Vec<Import>,
    /// Each inline module (`mod x { .. }`) as its chain from the file's
    /// module, outermost first.
    pub inline_mods: Vec<Vec<String>>,
}

/// One leaf of a path as [`path_at`] reads it.
pub struct Leaf {
    /// Its segments, a group's prefix included.
    pub segments: Vec<String>,
    /// `X as Y`: `Y`.
    pub alias: Option<String>,
    /// Ends in `::*`.
    pub glob: bool,
    /// The line of its last token.
    pub line: usize,
}

/// Reads `toks`: every path starting with `crate`, `self` or `super`, every
/// plain path `x::y` (whether `x` is a module is for the graph to say),
/// every leaf of every `use`, and the module-level imports; tracks inline
/// modules so `super` inside `mod tests { .. }` is resolved from there.
pub fn scan(toks: &[(Tok, usize)]) -> Scan {
    let mut out = Scan::default();
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    let at = |i: usize| toks.get(i).map(|t| &t.0);
    let ident = |i: usize| match at(i) {
        Some(Tok::Ident(s)) => Some(s.as_str()),
        _ => None,
    };
    while i < toks.len() {
        let names = |inline: &[(String, usize)]| inline.iter().map(|(n, _)| n.clone()).collect();
        // After `::` or `.` a word continues something else (`a::b`, `x.f`).
        let continues = i > 0 && matches!(toks[i - 1].0, Tok::Sep | Tok::Punct('.'));
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
            Tok::Ident(w) if w == "mod" && at(i + 2) == Some(&Tok::Punct('{')) => {
                if let Some(name) = ident(i + 1) {
                    inline.push((name.to_string(), depth + 1));
                    out.inline_mods.push(names(&inline));
                }
                i += 1;
            }
            Tok::Ident(w) if w == "use" && !continues => {
                let item_level = depth == inline.last().map_or(0, |(_, d)| *d);
                let names: Vec<String> = names(&inline);
                i = path_at(toks, i + 1, Vec::new(), &mut |mut leaf| {
                    // `use a::{self, B}`: the `self` leaf is `a` itself.
                    if leaf.segments.len() > 1 && leaf.segments.last().is_some_and(|s| s == "self")
                    {
                        leaf.segments.pop();
                    }
                    let Some(last) = leaf.segments.last().cloned() else {
                        return;
                    };
                    if item_level {
                        out.imports.push(Import {
                            inline: names.clone(),
                            name: (!leaf.glob).then(|| leaf.alias.unwrap_or(last)),
                            segments: leaf.segments.clone(),
                        });
                    }
                    out.refs.push(PathRef {
                        segments: leaf.segments,
                        line: leaf.line,
                        inline: names.clone(),
                    });
                });
            }
            Tok::Ident(w) if !continues => {
                let anchored = ["crate", "self", "super"].contains(&w.as_str());
                // `pub(crate)`, `pub(super)`: a visibility, not a path.
                let in_vis = at(i.wrapping_sub(1)) == Some(&Tok::Punct('('))
                    && at(i + 1) == Some(&Tok::Punct(')'));
                let plain = at(i + 1) == Some(&Tok::Sep) && ident(i + 2).is_some();
                let is_path = if anchored { !in_vis } else { plain };
                if !is_path {
                    i += 1;
                    continue;
                }
                let names: Vec<String> = names(&inline);
                i = path_at(toks, i, Vec::new(), &mut |leaf| {
                    out.refs.push(PathRef {
                        segments: leaf.segments,
                        line: leaf.line,
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
/// leaf; returns the index after it.
pub fn path_at(
    toks: &[(Tok, usize)],
    mut i: usize,
    mut segments: Vec<String>,
    found: &mut dyn FnMut(Leaf),
) -> usize {
    let at = |i: usize| toks.get(i).map(|t| &t.0);
    let mut line = toks.get(i).map_or(0, |t| t.1);
    let leaf = |segments, alias, glob, line| Leaf {
        segments,
        alias,
        glob,
        line,
    };
    loop {
        match at(i) {
            Some(Tok::Ident(w)) => {
                segments.push(w.clone());
                line = toks[i].1;
                i += 1;
            }
            Some(Tok::Punct('*')) => {
                found(leaf(segments, None, true, line));
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
                found(leaf(segments, None, false, line));
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
                found(leaf(segments, Some(alias.clone()), false, line));
                return i + 2;
            }
        }
        found(leaf(segments, None, false, line));
        return i;
    }
}
