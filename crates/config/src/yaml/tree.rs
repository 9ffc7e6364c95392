//! A small YAML document tree with a position on every node, built from
//! yaml-rust2's events without recursion. Only what a configuration needs:
//! scalars (as text), sequences and mappings. Aliases are refused (they are
//! how a small YAML file expands into a huge one), and so is nesting deeper
//! than [`MAX_DEPTH`].

use yaml_rust2::parser::{Event, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// Deepest nesting of sequences and mappings accepted; a configuration needs 4.
pub const MAX_DEPTH: usize = 32;

/// Most nodes (scalars, sequences, mappings) a document may have; counted as
/// a first pass over the events, so a document past it is refused before
/// any of its tree is built. A node costs about 100 bytes here and more in the
/// mapper: a 16 MiB `rules: [0,0,...]` (8.4 million scalars) cost 790 MiB
/// at `--check` and on a reload. A rule of one `bind` and one `connect` is
/// 5 nodes (7 with its name), so this is 14,000 to 20,000 such rules; a
/// port range is one node. A tree at this budget costs about 10 MiB.
pub const MAX_NODES: usize = 100_000;

/// Where a node starts: 1-based line and column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pos {
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
}

impl Pos {
    /// The position of a yaml-rust2 marker (lines from 1, columns from 0).
    fn of(m: &Marker) -> Self {
        Pos {
            line: m.line(),
            column: m.col() + 1,
        }
    }
}

/// One node of the document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    /// A scalar's text; `plain_null` when it was an unquoted empty or `~`/`null`.
    Scalar {
        /// The text, without quotes.
        text: String,
        /// Whether it was written as nothing, `~` or `null` without quotes.
        null: bool,
    },
    /// A sequence's items.
    Seq(Vec<Spanned>),
    /// A mapping's entries, in file order (keys may repeat; the mapper complains).
    Map(Vec<(Spanned, Spanned)>),
}

/// A node and where it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spanned {
    /// Where the node starts.
    pub pos: Pos,
    /// The node.
    pub node: Node,
}

/// A YAML syntax problem and where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyntaxError {
    /// Where the parser stopped.
    pub pos: Pos,
    /// What it found wrong.
    pub message: String,
}

/// A collection being built: its start, and its items so far.
enum Open {
    /// A sequence.
    Seq(Pos, Vec<Spanned>),
    /// A mapping, and a key waiting for its value.
    Map(Pos, Vec<(Spanned, Spanned)>, Option<Spanned>),
}

/// Counts the nodes of `text` without keeping any, and refuses it past
/// [`MAX_NODES`] (or at its first syntax error): a document too large is
/// refused before any of its tree exists. Building a tree as far as the
/// budget and then dropping it left 9 MiB resident after a refused reload
/// (freed, but not given back by the allocator).
fn count_nodes(text: &str) -> Result<(), SyntaxError> {
    let mut parser = Parser::new_from_str(text);
    let mut nodes = 0usize;
    loop {
        let (event, mark) = parser.next_token().map_err(|e| SyntaxError {
            pos: Pos::of(e.marker()),
            message: e.info().to_string(),
        })?;
        match event {
            Event::StreamEnd | Event::DocumentEnd => return Ok(()),
            Event::Scalar(..) | Event::SequenceStart(..) | Event::MappingStart(..) => {
                nodes += 1;
                if nodes > MAX_NODES {
                    return Err(SyntaxError {
                        pos: Pos::of(&mark),
                        message: format!(
                            "more than {MAX_NODES} values, lists and mappings (the most oi \
                             reads from one YAML file; split the rules or use port ranges)"
                        ),
                    });
                }
            }
            _ => {}
        }
    }
}

/// Parses `text` into its first document; an empty file is `None`.
pub fn parse(text: &str) -> Result<Option<Spanned>, SyntaxError> {
    let mut parser = Parser::new_from_str(text);
    let mut stack: Vec<Open> = Vec::new();
    let mut root: Option<Spanned> = None;
    count_nodes(text)?;
    loop {
        let (event, mark) = parser.next_token().map_err(|e| SyntaxError {
            pos: Pos::of(e.marker()),
            message: e.info().to_string(),
        })?;
        let pos = Pos::of(&mark);
        let done = match event {
            Event::StreamEnd | Event::DocumentEnd => break,
            Event::Nothing | Event::StreamStart | Event::DocumentStart => None,
            Event::Alias(_) => {
                return Err(SyntaxError {
                    pos,
                    message: "aliases (*name) are not supported".into(),
                })
            }
            Event::Scalar(text, style, _, _) => {
                let null = style == TScalarStyle::Plain
                    && matches!(text.as_str(), "" | "~" | "null" | "Null" | "NULL");
                Some(Spanned {
                    pos,
                    node: Node::Scalar { text, null },
                })
            }
            Event::SequenceStart(..) | Event::MappingStart(..) => {
                if stack.len() >= MAX_DEPTH {
                    return Err(SyntaxError {
                        pos,
                        message: format!("nested more than {MAX_DEPTH} levels deep"),
                    });
                }
                stack.push(if matches!(event, Event::SequenceStart(..)) {
                    Open::Seq(pos, Vec::new())
                } else {
                    Open::Map(pos, Vec::new(), None)
                });
                None
            }
            Event::SequenceEnd | Event::MappingEnd => match stack.pop() {
                Some(Open::Seq(pos, items)) => Some(Spanned {
                    pos,
                    node: Node::Seq(items),
                }),
                // A block mapping's start mark can lie past its first key;
                // the first key is where a reader looks.
                Some(Open::Map(pos, entries, _)) => Some(Spanned {
                    pos: entries.first().map_or(pos, |(k, _)| k.pos),
                    node: Node::Map(entries),
                }),
                None => None,
            },
        };
        let Some(node) = done else { continue };
        match stack.last_mut() {
            None => {
                root = Some(node);
            }
            Some(Open::Seq(_, items)) => items.push(node),
            Some(Open::Map(_, entries, key)) => match key.take() {
                None => *key = Some(node),
                Some(k) => entries.push((k, node)),
            },
        }
    }
    Ok(root)
}

impl Spanned {
    /// The scalar's text, or `None` for a collection or a null.
    pub fn text(&self) -> Option<&str> {
        match &self.node {
            Node::Scalar { text, null: false } => Some(text),
            _ => None,
        }
    }

    /// What kind of node this is, for messages.
    pub fn kind(&self) -> &'static str {
        match &self.node {
            Node::Scalar { null: true, .. } => "nothing",
            Node::Scalar { .. } => "a single value",
            Node::Seq(_) => "a list",
            Node::Map(_) => "a mapping",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_and_shapes() {
        let doc = parse("a: 1\nb:\n  - x\n  - 'y'\nc: {d: ~}\n")
            .expect("valid")
            .expect("a document");
        let Node::Map(entries) = &doc.node else {
            panic!("{doc:?}")
        };
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[0].0.text(), Some("a"));
        assert_eq!(entries[0].0.pos, Pos { line: 1, column: 1 });
        assert_eq!(entries[0].1.pos, Pos { line: 1, column: 4 });
        let Node::Seq(items) = &entries[1].1.node else {
            panic!()
        };
        assert_eq!(items[1].text(), Some("y"));
        assert_eq!(items[1].pos, Pos { line: 4, column: 5 });
        let Node::Map(inner) = &entries[2].1.node else {
            panic!()
        };
        assert_eq!(inner[0].1.kind(), "nothing");
    }

    #[test]
    fn refusals() {
        assert_eq!(parse("").expect("empty is fine"), None);
        let e = parse("a: &x 1\nb: *x\n").expect_err("alias");
        assert_eq!(e.message, "aliases (*name) are not supported");
        assert_eq!(e.pos, Pos { line: 2, column: 4 });
        let deep = format!("{}{}", "[".repeat(40), "]".repeat(40));
        let e = parse(&deep).expect_err("deep");
        assert_eq!(e.message, "nested more than 32 levels deep");
        let big = format!("[{}]", "0,".repeat(MAX_NODES));
        let e = parse(&big).expect_err("too many nodes");
        assert!(e.message.starts_with("more than 100000 values"), "{e:?}");
        let e = parse("a: [1, 2\n").expect_err("unclosed");
        assert!(e.pos.line >= 1, "{e:?}");
    }
}
