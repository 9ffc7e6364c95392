//! The action keys' tests: the cursor, the question, the request each
//! confirmed action sends (read back with the control socket's own
//! parser), cancelling, and the status line.

use super::*;
use crate::top::model::{view, Sample, ViewOptions};
use oi_wire::admin::{admin_request, Admin, Change};

/// A view of two rules: `0.0.0.0:80/tcp` over two backends (2 and 0
/// connections open) and `0.0.0.0:81/tcp` over one named with `name`.
fn screen(name: &str) -> View {
    let status = serde_json::json!({
        "rules": [
            {"name": "0.0.0.0:80/tcp", "backends": [
                {"name": "10.0.0.5:80", "connections_active": 2},
                {"name": "10.0.0.6:80", "connections_active": 0}]},
            {"name": "0.0.0.0:81/tcp", "backends": [{"name": name}]}
        ]
    })
    .to_string();
    let sample = Sample::parse(&status, "[]", 0.0).expect("sample");
    view(None, &sample, &ViewOptions::default())
}

/// The backend under the cursor, by its shown name.
fn under_cursor(c: &Controls, v: &View) -> Option<String> {
    c.selected_row(v).map(|i| v.backends[i].name.clone())
}

#[test]
fn the_cursor_moves_over_the_backends_and_stays_at_the_ends() {
    let v = screen("web");
    let mut c = Controls::default();
    assert_eq!(under_cursor(&c, &v), None, "nothing selected at first");
    assert_eq!(c.key(Key::Char('j'), &v), Step::Redraw);
    assert_eq!(under_cursor(&c, &v).as_deref(), Some("10.0.0.5:80"));
    c.key(Key::Down, &v);
    assert_eq!(under_cursor(&c, &v).as_deref(), Some("10.0.0.6:80"));
    c.key(Key::Down, &v);
    c.key(Key::Char('j'), &v);
    assert_eq!(under_cursor(&c, &v).as_deref(), Some("web"), "stays last");
    c.key(Key::Char('k'), &v);
    c.key(Key::Up, &v);
    c.key(Key::Up, &v);
    c.key(Key::Up, &v);
    assert_eq!(under_cursor(&c, &v).as_deref(), Some("10.0.0.5:80"));
    // From nowhere, up takes the last row.
    let mut c = Controls::default();
    c.key(Key::Up, &v);
    assert_eq!(under_cursor(&c, &v).as_deref(), Some("web"));
    // It follows its backend, not a row number: filtered to the second
    // rule, the same backend is under it.
    let opts = ViewOptions {
        filter: Some("0.0.0.0:81/tcp".into()),
        ..ViewOptions::default()
    };
    let status = serde_json::json!({"rules": [
        {"name": "0.0.0.0:81/tcp", "backends": [{"name": "web"}]}]})
    .to_string();
    let only = view(
        None,
        &Sample::parse(&status, "[]", 0.0).expect("sample"),
        &opts,
    );
    assert_eq!(c.selected_row(&only), Some(0));
    // No backends: nothing to select, and nothing breaks.
    let mut c = Controls::default();
    let empty = view(None, &Sample::default(), &ViewOptions::default());
    assert_eq!(c.key(Key::Down, &empty), Step::Redraw);
    assert_eq!(c.selected_row(&empty), None);
}

#[test]
fn each_action_asks_then_sends_what_oi_backend_sends() {
    let v = screen("web");
    for (key, verb, change) in [
        ('d', "drain", Change::Drain),
        ('e', "enable", Change::Enable),
        ('x', "disable", Change::Disable { grace_ms: 0 }),
    ] {
        let mut c = Controls::default();
        c.key(Key::Down, &v);
        assert_eq!(
            c.key(Key::Char(key), &v),
            Step::Redraw,
            "{verb}: asks first"
        );
        assert!(c.asking());
        let Some(Status::Question(q)) = &c.status else {
            panic!("{verb}: no question: {:?}", c.status)
        };
        assert!(
            q.starts_with(&format!(
                "{verb} backend 10.0.0.5:80 of rule 0.0.0.0:80/tcp"
            )),
            "{q}"
        );
        assert!(q.ends_with("? y/n"), "{q}");
        // A disable with the default grace closes the open ones now: it says so.
        assert_eq!(
            q.contains("closing its 2 open connections now"),
            key == 'x',
            "{q}"
        );
        let Step::Send(line) = c.key(Key::Char('y'), &v) else {
            panic!("{verb}: y sends nothing")
        };
        assert!(!c.asking());
        // The line oi's control socket reads as `oi backend VERB RULE BACKEND`.
        let grace = if key == 'x' { " 0" } else { "" };
        assert_eq!(
            line,
            format!("backend {verb} 0.0.0.0:80/tcp 10.0.0.5:80{grace}")
        );
        assert_eq!(
            admin_request(line.as_bytes()),
            Some(Ok(Admin::Backend {
                rule: b"0.0.0.0:80/tcp",
                backend: b"10.0.0.5:80",
                change
            }))
        );
    }
}

#[test]
fn any_other_key_cancels_and_nothing_is_sent() {
    let v = screen("web");
    let mut c = Controls::default();
    c.key(Key::Char('j'), &v);
    for cancel in [Key::Char('n'), Key::Char('q'), Key::Other, Key::Down] {
        c.key(Key::Char('d'), &v);
        assert_eq!(c.key(cancel, &v), Step::Redraw, "{cancel:?} is taken");
        assert!(!c.asking());
        assert_eq!(c.status, Some(Status::Answer("drain cancelled".into())));
    }
    // The cancelling down arrow did not move the cursor.
    assert_eq!(under_cursor(&c, &v).as_deref(), Some("10.0.0.5:80"));
    // Without a question, y is no action key.
    assert_eq!(c.key(Key::Char('y'), &v), Step::Pass);
    // top's own keys pass through.
    for k in ['q', 's', 'f', 'p', ' '] {
        assert_eq!(c.key(Key::Char(k), &v), Step::Pass, "{k}");
    }
    assert_eq!(c.key(Key::Other, &v), Step::Pass);
}

#[test]
fn an_action_without_a_selected_backend_says_how_to_select_one() {
    let v = screen("web");
    let mut c = Controls::default();
    assert_eq!(c.key(Key::Char('d'), &v), Step::Redraw);
    assert_eq!(c.status, Some(Status::Error(SELECT_FIRST.into())));
    assert!(!c.asking());
    // Selected, then filtered out of view: the same.
    c.key(Key::Down, &v);
    let empty = view(None, &Sample::default(), &ViewOptions::default());
    c.key(Key::Char('x'), &empty);
    assert_eq!(c.status, Some(Status::Error(SELECT_FIRST.into())));
}

#[test]
fn names_are_shown_escaped_and_asked_for_as_oi_sent_them() {
    // A YAML `name:` may hold control bytes: shown escaped, asked for as is.
    let v = screen("red\u{1b}[31m");
    let mut c = Controls::default();
    c.key(Key::Up, &v);
    c.key(Key::Char('d'), &v);
    let Some(Status::Question(q)) = &c.status else {
        panic!("no question")
    };
    assert!(q.contains("red\\x1b[31m") && !q.contains('\u{1b}'), "{q:?}");
    assert_eq!(
        c.key(Key::Char('y'), &v),
        Step::Send("backend drain 0.0.0.0:81/tcp red\u{1b}[31m".into())
    );
    // One with a space cannot be a word of the request: refused, not sent.
    let v = screen("two words");
    let mut c = Controls::default();
    c.key(Key::Up, &v);
    c.key(Key::Char('d'), &v);
    assert_eq!(c.key(Key::Char('y'), &v), Step::Redraw);
    assert!(
        matches!(&c.status, Some(Status::Error(e)) if e.contains("has a space")),
        "{:?}",
        c.status
    );
}

#[test]
fn the_answer_or_the_error_is_one_escaped_status_line() {
    let mut c = Controls::default();
    c.answered(Ok(
        "0.0.0.0:80/tcp 10.0.0.5:80: disabled (was ready)\nclosed 2 connections\n".into(),
    ));
    assert_eq!(
        c.status,
        Some(Status::Answer(
            "0.0.0.0:80/tcp 10.0.0.5:80: disabled (was ready); closed 2 connections".into()
        ))
    );
    c.answered(Err("no backend 'x\u{7}' of rule 'r'".into()));
    assert_eq!(
        c.status,
        Some(Status::Error(
            "error: no backend 'x\\x07' of rule 'r'".into()
        ))
    );
}
