//! Keeping error reports bounded: whatever a configuration file contains, the
//! errors and warnings it produces fit in a few hundred KiB, so `--check`
//! prints little and a reload that fails cannot exhaust memory.
//!
//! Three caps work together: the offending text shown in a message is escaped
//! and cut ([`Shown`], [`MAX_SHOWN_CHARS`]); one line lists at most
//! [`MAX_ERRORS_PER_LINE`] problems ([`LineErrors`]); one file lists at most
//! [`MAX_ERRORS`] errors and [`MAX_WARNINGS`] warnings ([`ErrorSink`]). Problems
//! beyond a cap are still counted, so the report says how many were left out.

use super::{ConfigError, ConfigErrors, MAX_ERRORS, MAX_ERRORS_PER_LINE, MAX_SHOWN_CHARS};
use std::fmt::{self, Write};
use std::sync::Arc;

/// Marks text that was cut at [`MAX_SHOWN_CHARS`]. ASCII, so it survives any
/// terminal or log encoding.
const CUT: &str = "...";

/// Text from outside (a config line, a field of it), displayed safely: control
/// characters and other non-printables escaped (`\t`, `\n`, `\r`, `\\`, `\xNN`
/// for ASCII controls, `\u{NNNN}` beyond ASCII) and the result cut to
/// [`MAX_SHOWN_CHARS`] characters, ending in `...` when cut.
///
/// Escaping keeps a hostile file from writing terminal control sequences into
/// `--check` output or the system log; cutting keeps one huge line from being
/// copied into every message about it.
pub struct Shown<'a>(pub &'a str);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Build at most MAX_SHOWN_CHARS plus one escape sequence, then stop:
        // the cost is bounded however long the input is.
        let mut out = String::new();
        let mut chars = 0;
        // Byte length of the longest prefix of `out` that still leaves room for CUT.
        let mut fits_with_cut = 0;
        for c in self.0.chars() {
            let start = out.len();
            push_escaped(&mut out, c);
            chars += out[start..].chars().count();
            if chars + CUT.len() <= MAX_SHOWN_CHARS {
                fits_with_cut = out.len();
            }
            if chars > MAX_SHOWN_CHARS {
                out.truncate(fits_with_cut);
                out.push_str(CUT);
                break;
            }
        }
        f.write_str(&out)
    }
}

/// Text from outside escaped like [`Shown`] but not cut: for names that are
/// already bounded where they are parsed (a unix socket name, 107 bytes at
/// most) and must be shown whole, in errors, logs and the status file.
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::with_capacity(self.0.len());
        for c in self.0.chars() {
            push_escaped(&mut out, c);
        }
        f.write_str(&out)
    }
}

/// Appends `c` to `out`, escaped if it is not a plainly printable character.
fn push_escaped(out: &mut String, c: char) {
    match c {
        '\t' => out.push_str("\\t"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\\' => out.push_str("\\\\"),
        c if c.is_ascii_control() => {
            let _ = write!(out, "\\x{:02x}", u32::from(c));
        }
        c if c.is_ascii() => out.push(c),
        // Beyond ASCII, Rust's own printable table decides: letters such as 'é'
        // and the U+FFFD of a lossy decode stay, C1 controls, bidi overrides and
        // lone combining marks become \u{...}.
        c => out.extend(c.escape_debug()),
    }
}

/// The problems found on one line: the first [`MAX_ERRORS_PER_LINE`] messages
/// kept, the rest only counted.
#[derive(Debug, Default)]
pub struct LineErrors {
    /// Messages for the report, in the order found; at most [`MAX_ERRORS_PER_LINE`].
    pub kept: Vec<String>,
    /// Problems found after the cap was reached; reported as a count.
    pub more: usize,
    /// Set when the file's list is already full ([`ErrorSink::problems`]):
    /// every problem is only counted, and costly messages (hints) are not
    /// even built. 8 million bad lines took 119 s of `--check` computing
    /// "did you mean" hints nobody would see.
    counting_only: bool,
}

impl LineErrors {
    /// Records one problem.
    pub fn push(&mut self, message: String) {
        if self.listing() {
            self.kept.push(message);
        } else {
            self.more += 1;
        }
    }

    /// Records one problem whose message is built only if it will be listed.
    pub fn push_with(&mut self, message: impl FnOnce() -> String) {
        if self.listing() {
            self.kept.push(message());
        } else {
            self.more += 1;
        }
    }

    /// Whether the next problem's message will be listed (not only counted).
    pub fn listing(&self) -> bool {
        !self.counting_only && self.kept.len() < MAX_ERRORS_PER_LINE
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.kept.is_empty() && self.more == 0
    }
}

/// The errors of one file, under the [`MAX_ERRORS`] cap.
#[derive(Debug, Default)]
pub struct ErrorSink {
    /// Errors listed in the report, in line order; at most [`MAX_ERRORS`].
    errors: Vec<ConfigError>,
    /// Errors found beyond the cap (including their lines' extras); reported as a count.
    omitted: usize,
    /// The included file being read, put into each error; `None` for the main file.
    file: Option<Arc<str>>,
}

impl ErrorSink {
    /// Names the file later errors are in (`None`: the main file).
    pub fn set_file(&mut self, file: Option<Arc<str>>) {
        self.file = file;
    }

    /// The file later errors are in.
    pub fn file(&self) -> Option<Arc<str>> {
        self.file.clone()
    }

    /// Records one problem at `line` and `column` (YAML), with the offending text.
    pub fn at(&mut self, line: usize, column: usize, message: String, text: &str) {
        if self.errors.len() < MAX_ERRORS {
            self.errors.push(ConfigError {
                file: self.file.clone(),
                line,
                column,
                message,
                text: Shown(text).to_string(),
                more: 0,
            });
        } else {
            self.omitted += 1;
        }
    }

    /// Whether a further error would be listed; past [`MAX_ERRORS`] errors are
    /// only counted, so parsers skip building their messages.
    pub fn listing(&self) -> bool {
        self.errors.len() < MAX_ERRORS
    }

    /// An empty set of problems for one line: counting only once the
    /// file's list is full (see [`LineErrors::push_with`]).
    pub fn problems(&self) -> LineErrors {
        LineErrors {
            counting_only: !self.listing(),
            ..LineErrors::default()
        }
    }

    /// Records every problem of `line`, whose (unescaped) text is `text`.
    pub fn line(&mut self, line: usize, text: &str, problems: LineErrors) {
        if !self.listing() {
            // Nothing more is listed: count, without escaping the text.
            self.omitted += problems.kept.len() + problems.more;
            return;
        }
        // Escape and cut the line once, not once per message.
        let shown = Shown(text).to_string();
        let mut listed_any = false;
        for message in problems.kept {
            if self.errors.len() < MAX_ERRORS {
                self.errors.push(ConfigError {
                    file: self.file.clone(),
                    line,
                    column: 0,
                    message,
                    text: shown.clone(),
                    more: 0,
                });
                listed_any = true;
            } else {
                self.omitted += 1;
            }
        }
        match self.errors.last_mut() {
            Some(last) if listed_any => last.more += problems.more,
            _ => self.omitted += problems.more,
        }
    }

    /// Records one problem of `line`.
    pub fn one(&mut self, line: usize, message: String, text: &str) {
        self.one_with(line, || message, text);
    }

    /// Records one problem of `line`, building its message only if it is listed.
    pub fn one_with(&mut self, line: usize, message: impl FnOnce() -> String, text: &str) {
        let mut problems = self.problems();
        problems.push_with(message);
        self.line(line, text, problems);
    }

    /// True when no error was recorded.
    pub fn is_empty(&self) -> bool {
        self.errors.is_empty() && self.omitted == 0
    }

    /// Puts the listed errors in file order (line, then column): for
    /// formats whose checks do not run in file order (YAML).
    pub fn sort_by_position(&mut self) {
        self.errors.sort_by_key(|e| (e.line, e.column));
    }

    /// How many errors were recorded, listed or only counted.
    pub fn count(&self) -> usize {
        self.errors.iter().map(|e| 1 + e.more).sum::<usize>() + self.omitted
    }

    /// `Ok(value)` when no error was recorded, else every error under `file`.
    pub fn into_result<T>(self, value: T, file: &str) -> Result<T, ConfigErrors> {
        if self.is_empty() {
            Ok(value)
        } else {
            Err(ConfigErrors {
                file: file.to_string(),
                errors: self.errors,
                omitted: self.omitted,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(s: &str) -> String {
        Shown(s).to_string()
    }

    #[test]
    fn escapes_controls_and_keeps_printables() {
        assert_eq!(shown("a b\tc\r\n"), "a b\\tc\\r\\n");
        assert_eq!(shown("\x1b[31mred\x7f\0"), "\\x1b[31mred\\x7f\\x00");
        assert_eq!(shown("C:\\x"), "C:\\\\x");
        assert_eq!(shown("é.com \u{fffd}"), "é.com \u{fffd}");
        assert_eq!(shown("\u{202e}evil\u{85}"), "\\u{202e}evil\\u{85}");
        assert_eq!(shown("quote ' and \""), "quote ' and \"");
    }

    #[test]
    fn cuts_long_text_at_whole_characters() {
        let exact = "a".repeat(MAX_SHOWN_CHARS);
        assert_eq!(shown(&exact), exact);
        let long = "é".repeat(MAX_SHOWN_CHARS + 1);
        let s = shown(&long);
        assert_eq!(s.chars().count(), MAX_SHOWN_CHARS);
        assert!(s.ends_with(CUT));
        assert_eq!(
            s.trim_end_matches(CUT),
            "é".repeat(MAX_SHOWN_CHARS - CUT.len())
        );
        // An escape sequence is never split by the cut.
        let controls = "\x01".repeat(MAX_SHOWN_CHARS);
        let s = shown(&controls);
        assert!(s.chars().count() <= MAX_SHOWN_CHARS, "{s}");
        assert!(s.trim_end_matches(CUT).ends_with("\\x01"), "{s}");
        // A huge input costs no more than a short one to show.
        assert_eq!(shown(&"x".repeat(10_000_000)).len(), MAX_SHOWN_CHARS);
    }

    #[test]
    fn line_and_file_caps() {
        let mut sink = ErrorSink::default();
        let mut line = LineErrors::default();
        for i in 0..(MAX_ERRORS_PER_LINE + 7) {
            line.push(format!("e{i}"));
        }
        assert_eq!((line.kept.len(), line.more), (MAX_ERRORS_PER_LINE, 7));
        sink.line(1, "text", line);
        assert_eq!(sink.errors.len(), MAX_ERRORS_PER_LINE);
        assert_eq!(sink.errors[MAX_ERRORS_PER_LINE - 1].more, 7);
        for n in 2..=(MAX_ERRORS + 10) {
            sink.one(n, "bad".into(), "t");
        }
        assert_eq!(sink.errors.len(), MAX_ERRORS);
        let listed = MAX_ERRORS - MAX_ERRORS_PER_LINE;
        assert_eq!(sink.omitted, MAX_ERRORS + 9 - listed);
    }

    #[test]
    fn messages_past_the_cap_are_counted_without_being_built() {
        let mut sink = ErrorSink::default();
        for n in 1..=MAX_ERRORS {
            assert!(sink.listing());
            sink.one_with(n, || "listed".into(), "t");
        }
        assert!(!sink.listing());
        let mut built = 0;
        let mut problems = sink.problems();
        assert!(!problems.listing());
        for _ in 0..3 {
            problems.push_with(|| {
                built += 1;
                String::new()
            });
        }
        sink.line(MAX_ERRORS + 1, "t", problems);
        sink.one_with(
            MAX_ERRORS + 2,
            || {
                built += 1;
                String::new()
            },
            "t",
        );
        assert_eq!(built, 0, "no message (or hint) built past the cap");
        assert_eq!(sink.count(), MAX_ERRORS + 4);
    }
}
