//! `oi top`: a live view of a running oi, over its control socket, like `top`.
//!
//! Each interval it asks the control socket for `status json` and
//! `connections json` (two short requests, answered on oi's observer thread,
//! never on a forwarding thread) and shows per rule the open connections, new
//! connections per second, bytes per second each way, refusals and errors;
//! per backend its health, load and probe round trip; and the busiest live
//! connections. Keys: `q` quits, `s` changes the order, `f` shows one rule
//! after another, `p` pauses; j/k or the arrow keys select a backend, and
//! `d`, `e`, `x` drain, enable or disable it once confirmed with `y`
//! ([`act`]: the request `oi backend` sends, on the same control socket).
//! When standard output is not a terminal it
//! prints one text table (rates over one interval) and exits, so
//! `oi top > file` and `oi top | less` work.
//!
//! The terminal side is ratatui over crossterm: ratatui is the maintained
//! successor of tui-rs, the terminal UI crate the Rust ecosystem's top-like
//! tools (bottom, gitui, kdash) use; it diffs frames (no flicker) and re-lays
//! out on resize, and crossterm restores the terminal on exit and on panic.

pub mod act;
pub mod model;
mod screen;

use crate::observe::{ask, ask_admin, Query};
use act::{Controls, Key, Step};
use model::{Sample, View, ViewOptions};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Polls `socket` once.
fn poll(socket: &Path, started: Instant) -> Result<Sample, String> {
    let status = ask(socket, Query::Status, true).map_err(|e| e.to_string())?;
    let conns = ask(socket, Query::Connections, true).map_err(|e| e.to_string())?;
    Sample::parse(&status, &conns, started.elapsed().as_secs_f64())
}

/// Runs `oi top` against the control socket at `socket`.
pub fn run(socket: &Path, interval: Duration) -> ExitCode {
    let started = Instant::now();
    if !std::io::stdout().is_terminal() {
        return once(socket, interval, started);
    }
    // Fail before taking over the screen if oi is not there at all.
    let first = match poll(socket, started) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("oi: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut terminal = ratatui::init();
    let result = live(&mut terminal, socket, interval, started, first);
    ratatui::restore();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("oi: terminal: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Not a terminal: two polls one interval apart, one table, done.
fn once(socket: &Path, interval: Duration, started: Instant) -> ExitCode {
    let first = poll(socket, started);
    std::thread::sleep(interval);
    match (first, poll(socket, started)) {
        (Ok(a), Ok(b)) => {
            let opts = ViewOptions::default();
            print!("{}", model::text(&model::view(Some(&a), &b, &opts), &opts));
            ExitCode::SUCCESS
        }
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("oi: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The interactive loop: poll when due (unless paused), draw, wait for a key
/// until the next poll is due.
fn live(
    terminal: &mut ratatui::DefaultTerminal,
    socket: &Path,
    interval: Duration,
    started: Instant,
    first: Sample,
) -> std::io::Result<()> {
    let socket_name = socket.display().to_string();
    let mut opts = ViewOptions::default();
    let mut prev: Option<Sample> = None;
    let mut cur = first;
    let mut paused = false;
    let mut error: Option<String> = None;
    let mut controls = Controls::default();
    let mut next_poll = Instant::now() + interval;
    // After an action, one poll shows its effect, paused or not.
    let mut refresh = false;
    loop {
        let view: View = model::view(prev.as_ref(), &cur, &opts);
        terminal.draw(|f| {
            screen::draw(
                f,
                &view,
                &opts,
                &screen::Header {
                    socket: &socket_name,
                    interval: interval.as_secs_f64(),
                    paused,
                    error: error.as_deref(),
                },
                &controls,
            )
        })?;
        let wait = next_poll.saturating_duration_since(Instant::now());
        if event::poll(wait)? {
            match event::read()? {
                Event::Key(k) if k.kind == KeyEventKind::Press => {
                    if k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL) {
                        return Ok(());
                    }
                    let key = match k.code {
                        KeyCode::Up => Key::Up,
                        KeyCode::Down => Key::Down,
                        KeyCode::Char(c) => Key::Char(c),
                        _ => Key::Other,
                    };
                    match controls.key(key, &view) {
                        Step::Redraw => {}
                        Step::Send(line) => {
                            // One short request, answered on oi's observer
                            // thread: the screen waits for it (at most the
                            // control socket's timeout).
                            let outcome =
                                ask_admin(socket, &line, false).map_err(|e| e.to_string());
                            controls.answered(outcome);
                            refresh = true;
                            next_poll = Instant::now();
                        }
                        Step::Pass => match k.code {
                            KeyCode::Char('q') | KeyCode::Esc => return Ok(()),
                            KeyCode::Char('s') => opts.sort = opts.sort.next(),
                            KeyCode::Char('f') => opts.next_filter(&cur),
                            KeyCode::Char('p') | KeyCode::Char(' ') => paused = !paused,
                            _ => {}
                        },
                    }
                }
                // A resize redraws at the new size on the next pass.
                _ => {}
            }
            continue;
        }
        next_poll = Instant::now() + interval;
        let once = std::mem::take(&mut refresh);
        if paused && !once {
            continue;
        }
        match poll(socket, started) {
            Ok(s) => {
                prev = Some(std::mem::replace(&mut cur, s));
                error = None;
            }
            // oi gone or busy: say so, keep the last good view up.
            Err(e) => error = Some(e),
        }
    }
}
