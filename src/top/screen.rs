//! Drawing a [`View`] on the terminal with ratatui. ratatui keeps the last
//! frame and writes only the cells that changed, so a redraw every interval
//! does not flicker, and it lays the tables out again for the new size when
//! the terminal is resized.

use super::act::{Controls, Status};
use super::model::{human_rate, View, ViewOptions};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style, Stylize};
use ratatui::text::Line;
use ratatui::widgets::{Block, Row, Table, TableState};
use ratatui::Frame;

/// What the header shows besides the view.
pub(super) struct Header<'a> {
    /// The control socket polled.
    pub socket: &'a str,
    /// Seconds between polls.
    pub interval: f64,
    /// Frozen by `p`.
    pub paused: bool,
    /// The last poll's error, if it failed (the last good view stays up).
    pub error: Option<&'a str>,
}

/// The help line (while a question waits for `y`, a line saying how to
/// answer it shows instead).
const KEYS: &str = "q quit   s sort   f filter by rule   p pause   j/k select backend   d drain   e enable   x disable";

/// Draws one frame; `c` holds the backend cursor and the status line.
pub(super) fn draw(f: &mut Frame, v: &View, opts: &ViewOptions, h: &Header, c: &Controls) {
    let rule_rows = v.rules.len() as u16;
    let backend_rows = v.backends.len() as u16;
    // The TLS table only when a rule speaks TLS.
    let tls_rows = match v.tls.len() as u16 {
        0 => 0,
        n => n.saturating_add(3),
    };
    let [head, rules, tls, backends, conns, status, keys] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Max(rule_rows.saturating_add(3)),
        Constraint::Max(tls_rows),
        Constraint::Max(backend_rows.saturating_add(3)),
        Constraint::Min(4),
        Constraint::Length(1),
        Constraint::Length(1),
    ])
    .areas(f.area());

    let state = if h.paused { "  PAUSED" } else { "" };
    let filter = opts
        .filter
        .as_deref()
        .map_or(String::new(), |r| format!("  rule: {r}"));
    f.render_widget(
        ratatui::widgets::Paragraph::new(vec![
            Line::from(format!(
                "oi top — {}  every {:.1}s  sort: {}{filter}{state}",
                h.socket,
                h.interval,
                opts.sort.label()
            ))
            .bold(),
            match h.error {
                Some(e) => Line::from(format!("cannot poll: {e}")).red(),
                None => Line::from(format!(
                    "active {}  new {:.1}/s  in {}  out {}  descriptors {}",
                    v.active,
                    v.new_per_s,
                    human_rate(v.in_per_s),
                    human_rate(v.out_per_s),
                    v.descriptors
                )),
            },
        ]),
        head,
    );

    let bold = Style::new().add_modifier(Modifier::BOLD);
    // Name columns as wide as their longest entry (within bounds), so the
    // numbers sit next to the names instead of across the screen.
    let fit = |len: Option<usize>, head: &str| {
        Constraint::Length(len.unwrap_or(0).max(head.len()).clamp(4, 48) as u16)
    };
    let rule_w = fit(v.rules.iter().map(|r| r.name.chars().count()).max(), "RULE");
    let b_rule_w = fit(
        v.backends.iter().map(|b| b.rule.chars().count()).max(),
        "RULE",
    );
    let b_name_w = fit(
        v.backends.iter().map(|b| b.name.chars().count()).max(),
        "BACKEND",
    );
    let c_rule_w = fit(v.conns.iter().map(|c| c.rule.chars().count()).max(), "RULE");
    let c_client_w = fit(
        v.conns.iter().map(|c| c.client.chars().count()).max(),
        "CLIENT",
    );
    let c_back_w = fit(
        v.conns.iter().map(|c| c.backend.chars().count()).max(),
        "BACKEND",
    );
    let table = Table::new(
        v.rules.iter().map(|r| {
            Row::new(vec![
                r.name.clone(),
                r.active.to_string(),
                format!("{:.1}", r.new_per_s),
                human_rate(r.in_per_s),
                human_rate(r.out_per_s),
                r.refused.to_string(),
                r.errors.to_string(),
            ])
        }),
        [
            rule_w,
            Constraint::Length(8),
            Constraint::Length(8),
            Constraint::Length(10),
            Constraint::Length(10),
            Constraint::Length(8),
            Constraint::Length(7),
        ],
    )
    .header(Row::new(["RULE", "ACTIVE", "NEW/S", "IN", "OUT", "REFUSED", "ERRORS"]).style(bold))
    .block(Block::bordered().title("Rules"));
    f.render_widget(table, rules);

    if !v.tls.is_empty() {
        let tls_rule_w = fit(v.tls.iter().map(|t| t.rule.chars().count()).max(), "RULE");
        let table = Table::new(
            v.tls.iter().map(|t| {
                let row = Row::new(vec![
                    t.rule.clone(),
                    t.ends.to_string(),
                    t.handshakes.to_string(),
                    t.resumed.to_string(),
                    t.failed.to_string(),
                    t.expires(),
                ]);
                if t.trouble() {
                    row.red()
                } else {
                    row
                }
            }),
            [
                tls_rule_w,
                Constraint::Length(8),
                Constraint::Length(11),
                Constraint::Length(8),
                Constraint::Length(7),
                Constraint::Length(8),
            ],
        )
        .header(Row::new(["RULE", "TLS", "HANDSHAKES", "RESUMED", "FAILED", "EXPIRES"]).style(bold))
        .block(Block::bordered().title("TLS"));
        f.render_widget(table, tls);
    }

    let table = Table::new(
        v.backends.iter().map(|b| {
            let row = Row::new(vec![
                b.rule.clone(),
                b.name.clone(),
                b.state().to_string(),
                b.active.to_string(),
                format!("{:.0}%", b.load * 100.0),
                human_rate(b.bytes_per_s),
                b.probe_ms.map_or("-".into(), |p| format!("{p:.1}ms")),
            ]);
            if b.state() == "up" {
                row
            } else {
                row.red()
            }
        }),
        [
            b_rule_w,
            b_name_w,
            Constraint::Length(8),
            Constraint::Length(7),
            Constraint::Length(6),
            Constraint::Length(10),
            Constraint::Length(8),
        ],
    )
    .header(
        Row::new([
            "RULE", "BACKEND", "STATE", "ACTIVE", "LOAD", "BYTES", "PROBE",
        ])
        .style(bold),
    )
    .block(Block::bordered().title("Backends"))
    // The selected backend, reversed; the table scrolls to keep it shown.
    .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
    .highlight_symbol(">");
    let mut state = TableState::default().with_selected(c.selected_row(v));
    f.render_stateful_widget(table, backends, &mut state);

    let table = Table::new(
        v.conns.iter().map(|c| {
            Row::new(vec![
                c.rule.clone(),
                c.kind.clone(),
                c.client.clone(),
                c.backend.clone(),
                format!("{:.0}s", c.age),
                human_rate(c.in_per_s),
                human_rate(c.out_per_s),
            ])
        }),
        [
            c_rule_w,
            Constraint::Length(5),
            c_client_w,
            c_back_w,
            Constraint::Length(7),
            Constraint::Length(10),
            Constraint::Length(10),
        ],
    )
    .header(Row::new(["RULE", "KIND", "CLIENT", "BACKEND", "AGE", "IN", "OUT"]).style(bold))
    .block(Block::bordered().title(format!("Busiest connections ({} live)", v.conns.len())));
    f.render_widget(table, conns);

    f.render_widget(
        match &c.status {
            None => Line::from(""),
            Some(Status::Question(q)) => Line::from(q.as_str()).bold().yellow(),
            Some(Status::Answer(a)) => Line::from(a.as_str()).green(),
            Some(Status::Error(e)) => Line::from(e.as_str()).red(),
        },
        status,
    );
    let help = if c.asking() {
        "y confirm   any other key cancels"
    } else {
        KEYS
    };
    f.render_widget(Line::from(help).reversed(), keys);
}
