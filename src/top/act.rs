//! `oi top`'s action keys (pure: no I/O, no terminal). A cursor moves over
//! the backends table (↑/↓ or k/j); `d` drains, `e` enables and `x`
//! disables the backend under it, each asked first (`drain backend B of
//! rule R? y/n`): `y` sends the request line `oi backend drain|enable|disable`
//! sends (`oi_wire::admin` reads it), any other key cancels. The answer, or
//! the error, stays in a status line until the next action.
//!
//! The cursor holds the backend's names, not a row number: each poll, a
//! sort or a filter moves rows, and the cursor stays on its backend.

use super::model::{BackendRow, View};

/// A key as the actions read it (`mod.rs` maps the terminal's keys).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    /// The up arrow.
    Up,
    /// The down arrow.
    Down,
    /// A character key.
    Char(char),
    /// Any other key (Esc, function keys).
    Other,
}

/// What an action key asks for the selected backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    /// `d`: no new connections; open ones finish.
    Drain,
    /// `e`: back to the file's state and weight.
    Enable,
    /// `x`: no new connections, and its open ones closed now (a grace of 0,
    /// as `oi backend disable` without `--grace`).
    Disable,
}

impl Act {
    /// The request's verb, as `oi backend` names it.
    pub fn verb(self) -> &'static str {
        match self {
            Act::Drain => "drain",
            Act::Enable => "enable",
            Act::Disable => "disable",
        }
    }
}

/// The status line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    /// An action waits for `y`.
    Question(String),
    /// What oi answered, or that the action was cancelled.
    Answer(String),
    /// What went wrong: oi's error, or why nothing was asked.
    Error(String),
}

/// What the caller does after a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Not an action key: the caller's own keys (q, s, f, p) take it.
    Pass,
    /// Taken: draw again.
    Redraw,
    /// Send this request line to the control socket, then hand the
    /// outcome to [`Controls::answered`].
    Send(String),
}

/// An action asked and not yet confirmed.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Pending {
    /// What it asks.
    act: Act,
    /// The rule's and backend's names as oi sent them, for the request.
    asked_as: (String, String),
}

/// The action keys' state, kept across polls.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Controls {
    /// The backend under the cursor, by its (rule, backend) names as oi
    /// sent them; `None` until a cursor key.
    selected: Option<(String, String)>,
    /// The action waiting for `y`.
    pending: Option<Pending>,
    /// The status line, once there is something to say.
    pub status: Option<Status>,
}

/// What the status line says when an action key finds no backend selected.
pub const SELECT_FIRST: &str = "select a backend first: j/k or the arrow keys";

impl Controls {
    /// The row of `view.backends` under the cursor, if it is shown.
    pub fn selected_row(&self, view: &View) -> Option<usize> {
        let sel = self.selected.as_ref()?;
        view.backends.iter().position(|b| &b.asked_as == sel)
    }

    /// Takes `key`, with `view` the screen it was pressed on.
    pub fn key(&mut self, key: Key, view: &View) -> Step {
        if let Some(p) = self.pending.take() {
            if matches!(key, Key::Char('y' | 'Y')) {
                return match request(p.act, &p.asked_as) {
                    Ok(line) => {
                        self.status = Some(Status::Answer(format!(
                            "asking: {}",
                            oi_config::Escaped(&line)
                        )));
                        Step::Send(line)
                    }
                    Err(why) => {
                        self.status = Some(Status::Error(why));
                        Step::Redraw
                    }
                };
            }
            self.status = Some(Status::Answer(format!("{} cancelled", p.act.verb())));
            return Step::Redraw;
        }
        let act = match key {
            Key::Up | Key::Char('k') => return self.move_by(view, false),
            Key::Down | Key::Char('j') => return self.move_by(view, true),
            Key::Char('d') => Act::Drain,
            Key::Char('e') => Act::Enable,
            Key::Char('x') => Act::Disable,
            _ => return Step::Pass,
        };
        let Some(row) = self.selected_row(view).and_then(|i| view.backends.get(i)) else {
            self.status = Some(Status::Error(SELECT_FIRST.into()));
            return Step::Redraw;
        };
        self.status = Some(Status::Question(question(act, row)));
        self.pending = Some(Pending {
            act,
            asked_as: row.asked_as.clone(),
        });
        Step::Redraw
    }

    /// The outcome of the request [`Step::Send`] gave: oi's answer (its
    /// lines on one, escaped: it names the backend as the file does), or
    /// the error.
    pub fn answered(&mut self, outcome: Result<String, String>) {
        let one_line = |text: &str| {
            let lines: Vec<&str> = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect();
            oi_config::Escaped(&lines.join("; ")).to_string()
        };
        self.status = Some(match outcome {
            Ok(text) => Status::Answer(one_line(&text)),
            Err(why) => Status::Error(format!("error: {}", one_line(&why))),
        });
    }

    /// Whether an action waits for `y` (the help line says so).
    pub fn asking(&self) -> bool {
        self.pending.is_some()
    }

    /// The cursor one row down (`down`) or up, staying at the ends; from
    /// nowhere (or from a backend no longer shown), the first or last row.
    fn move_by(&mut self, view: &View, down: bool) -> Step {
        let last = view.backends.len().checked_sub(1);
        let row = match (self.selected_row(view), last) {
            (_, None) => None,
            (Some(i), Some(last)) if down => Some(i.saturating_add(1).min(last)),
            (Some(i), Some(_)) => Some(i.saturating_sub(1)),
            (None, Some(_)) if down => Some(0),
            (None, Some(last)) => Some(last),
        };
        self.selected = row
            .and_then(|i| view.backends.get(i))
            .map(|b| b.asked_as.clone());
        Step::Redraw
    }
}

/// The confirmation asked for `act` on `row`.
fn question(act: Act, row: &BackendRow) -> String {
    let closing = match (act, row.active) {
        (Act::Disable, 0) => String::new(),
        (Act::Disable, 1) => ", closing its open connection now".to_string(),
        (Act::Disable, n) => format!(", closing its {n} open connections now"),
        _ => String::new(),
    };
    format!(
        "{} backend {} of rule {}{closing}? y/n",
        act.verb(),
        row.name,
        row.rule
    )
}

/// The request line for `act` on the backend named `asked_as` (rule,
/// backend): what `oi backend drain|enable|disable RULE BACKEND` sends (a
/// disable with its default grace, 0 ms). A name with whitespace in it
/// cannot be a word of the line: refused, as `oi backend` refuses it.
pub fn request(act: Act, asked_as: &(String, String)) -> Result<String, String> {
    let (rule, backend) = asked_as;
    for (what, name) in [("rule", rule), ("backend", backend)] {
        if name.is_empty() || name.chars().any(char::is_whitespace) {
            return Err(format!(
                "the {what} '{}' cannot be asked for: it is empty or has a space",
                oi_config::Escaped(name)
            ));
        }
    }
    let grace = if act == Act::Disable { " 0" } else { "" };
    Ok(format!("backend {} {rule} {backend}{grace}", act.verb()))
}

#[cfg(test)]
mod tests;
