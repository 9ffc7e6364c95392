//! Looks up every host name of a configuration before its rules are
//! resolved: each distinct name once, [`LOOKUP_THREADS`] at a time, within
//! [`LOOKUP_DEADLINE`] for all of them. One by one, 26,000 names that do not
//! resolve took over two minutes (about 5 ms to 200 ms each, the resolver's
//! own time), and systemd runs `--check` before every start inside its
//! timeout; now a start or `--check` spends at most the deadline on names
//! and says how many it did not get to.

use std::collections::HashMap;
use std::net::{IpAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// Most lookups in flight at once. Each is a thread blocked in the system
/// resolver, mostly waiting on the network, so more than the cores; a lookup
/// still blocked at the deadline keeps its thread until the resolver gives
/// up, so this is also the most threads a slow resolver can hold.
pub const LOOKUP_THREADS: usize = 16;

/// How long the lookups of one configuration may take together. A name not
/// answered by then is an error for its rules (as a name that does not
/// resolve), and one line counts them. systemd gives a start 90 s, which
/// holds `--check` and the start's own lookups.
pub const LOOKUP_DEADLINE: Duration = Duration::from_secs(15);

/// Stack of a lookup thread. The default 2 MiB each, 32 MiB for the 16,
/// counted against RLIMIT_DATA beside the rules being resolved; the system
/// resolver keeps its buffers within 64 KiB of stack (as musl's whole
/// default thread stack of 128 KiB holds it).
const LOOKUP_STACK: usize = 256 * 1024;

/// One name's outcome: its addresses in resolver order, or why not.
pub type Found = Result<Vec<IpAddr>, String>;

/// How one name is looked up: the system resolver, or a stand-in in tests.
pub type Lookup = fn(&str) -> Found;

/// What [`lookup_all`] found.
#[derive(Debug, Default)]
pub struct Lookups {
    /// Each name answered in time, with its outcome.
    found: HashMap<Arc<str>, Found>,
    /// Names not answered by the deadline.
    pub late: usize,
    /// The deadline they missed, for messages.
    pub deadline: Duration,
}

impl Lookups {
    /// `name`'s addresses, or the error its rules report.
    pub fn get(&self, name: &str) -> Found {
        match self.found.get(name) {
            Some(found) => found.clone(),
            None => Err(format!(
                "not looked up: no answer within {:?}",
                self.deadline
            )),
        }
    }
}

/// The system resolver (getaddrinfo, as `ToSocketAddrs`): every address of
/// `name`, or the resolver's error.
pub fn system(name: &str) -> Found {
    (name, 0)
        .to_socket_addrs()
        .map(|found| found.map(|a| a.ip()).collect())
        .map_err(|e| e.to_string())
}

/// Looks up each of `names` (repeats once) with `lookup`, at most `threads`
/// at a time, and returns what was answered within `deadline`. Lookups
/// still running then are left to finish on their own threads, their
/// answers dropped: the system resolver cannot be interrupted.
pub fn lookup_all(
    names: impl IntoIterator<Item = Arc<str>>,
    lookup: Lookup,
    threads: usize,
    deadline: Duration,
) -> Lookups {
    let mut seen = std::collections::HashSet::new();
    let names: Arc<[Arc<str>]> = names
        .into_iter()
        .filter(|n| seen.insert(n.clone()))
        .collect();
    drop(seen);
    let mut out = Lookups {
        deadline,
        ..Lookups::default()
    };
    if names.is_empty() {
        return out;
    }
    let until = Instant::now() + deadline;
    let next = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel::<(usize, Found)>();
    let mut started = 0;
    for _ in 0..threads.clamp(1, names.len()) {
        let (names, next, stop, tx) = (names.clone(), next.clone(), stop.clone(), tx.clone());
        let worker = move || {
            while !stop.load(Ordering::Relaxed) {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(name) = names.get(i) else { break };
                if tx.send((i, lookup(name))).is_err() {
                    break;
                }
            }
        };
        let spawned = std::thread::Builder::new()
            .name("oi-lookup".into())
            .stack_size(LOOKUP_STACK)
            .spawn(worker);
        started += usize::from(spawned.is_ok());
    }
    drop(tx);
    if started == 0 {
        // No thread to be had: look up here, one by one, until the deadline.
        while Instant::now() < until {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(name) = names.get(i) else { break };
            out.found.insert(name.clone(), lookup(name));
        }
    } else {
        while out.found.len() < names.len() {
            let left = until.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok((i, found)) => {
                    if let Some(name) = names.get(i) {
                        out.found.insert(name.clone(), found);
                    }
                }
                // The deadline, or every worker gone.
                Err(_) => break,
            }
        }
        stop.store(true, Ordering::Relaxed);
    }
    out.late = names.len() - out.found.len();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Calls of [`counting`].
    static CALLS: AtomicUsize = AtomicUsize::new(0);

    /// Answers `a.test` with 192.0.2.1, fails anything else; counts calls.
    fn counting(name: &str) -> Found {
        CALLS.fetch_add(1, Ordering::Relaxed);
        match name {
            "a.test" => Ok(vec![IpAddr::from([192, 0, 2, 1])]),
            _ => Err("unknown".into()),
        }
    }

    /// Never answers a name starting with `hang` (as a resolver whose
    /// server drops every query); fails the rest at once.
    fn hangs(name: &str) -> Found {
        if name.starts_with("hang") {
            loop {
                std::thread::park();
            }
        }
        Err("unknown".into())
    }

    #[test]
    fn each_name_is_looked_up_once() {
        let names = ["a.test", "b.test", "a.test", "b.test", "a.test"].map(Arc::from);
        let found = lookup_all(names, counting, 4, Duration::from_secs(60));
        assert_eq!(CALLS.load(Ordering::Relaxed), 2);
        assert_eq!(found.late, 0);
        assert_eq!(found.get("a.test"), Ok(vec![IpAddr::from([192, 0, 2, 1])]));
        assert_eq!(found.get("b.test"), Err("unknown".into()));
    }

    #[test]
    fn names_not_answered_by_the_deadline_are_counted_not_waited_for() {
        // 40 names that never answer on 4 threads: the call returns at its
        // deadline (before, one blocked lookup blocked `--check` forever).
        let names = (0..40)
            .map(|i| Arc::from(format!("hang{i}.test")))
            .chain((0..3).map(|i| Arc::from(format!("fast{i}.test"))));
        let found = lookup_all(names, hangs, 4, Duration::from_millis(300));
        // The four threads hang on the first four names: none is answered.
        assert_eq!(found.late, 43);
        let late = found.get("fast2.test").expect_err("late");
        assert_eq!(late, "not looked up: no answer within 300ms");
    }
}
