//! The operator commands' arguments (`oi backend`, `oi close`) and the
//! control socket request line each becomes (`oi_wire::admin` reads it).

use clap::{Args, Subcommand};
use std::time::Duration;

/// `oi backend ...`.
#[derive(Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum BackendAction {
    /// No new connections to BACKEND; its open connections finish.
    Drain {
        /// The rule, as `oi status` prints it (`0.0.0.0:80/tcp`).
        rule: String,
        /// The backend, as `oi status` prints it (address or name).
        backend: String,
    },
    /// No new connections to BACKEND, and its open connections closed once
    /// --grace has passed (unless it is enabled or drained meanwhile).
    Disable {
        /// The rule, as `oi status` prints it.
        rule: String,
        /// The backend, as `oi status` prints it.
        backend: String,
        /// How long its open connections may run on (0 to 365 days).
        #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = super::parse_duration)]
        grace: Duration,
    },
    /// Back to the file's state and weight.
    Enable {
        /// The rule, as `oi status` prints it.
        rule: String,
        /// The backend, as `oi status` prints it.
        backend: String,
    },
    /// Choose BACKEND by weight N (0 to 256) instead of the file's weight.
    Weight {
        /// The rule, as `oi status` prints it.
        rule: String,
        /// The backend, as `oi status` prints it.
        backend: String,
        /// Its share of new connections, 0 (none) to 256.
        #[arg(value_parser = clap::value_parser!(u16).range(0..=256))]
        weight: u16,
    },
}

/// `oi close`: which connections.
#[derive(Args, Debug, Clone, PartialEq, Eq)]
#[group(required = true, multiple = false)]
pub struct CloseWhich {
    /// The connection `oi connections` lists with this ID.
    #[arg(long, value_name = "N")]
    pub id: Option<u64>,
    /// Every connection from this client address, or network (ADDR/BITS).
    #[arg(long, value_name = "ADDR[/BITS]")]
    pub client: Option<String>,
    /// Every connection of this rule (as `oi status` prints it).
    #[arg(long, value_name = "RULE")]
    pub rule: Option<String>,
    /// Every connection of this rule to this backend.
    #[arg(long, num_args = 2, value_names = ["RULE", "BACKEND"])]
    pub backend: Option<Vec<String>>,
}

/// A word of a request line: no whitespace inside (the socket splits on it).
fn word(s: &str, what: &str) -> Result<String, String> {
    if s.is_empty() || s.chars().any(char::is_whitespace) {
        return Err(format!(
            "the {what} '{s}' cannot be asked for: it is empty or has a space"
        ));
    }
    Ok(s.to_string())
}

impl BackendAction {
    /// The request line.
    pub fn line(&self) -> Result<String, String> {
        let (verb, rule, backend, extra) = match self {
            BackendAction::Drain { rule, backend } => ("drain", rule, backend, String::new()),
            BackendAction::Enable { rule, backend } => ("enable", rule, backend, String::new()),
            BackendAction::Disable {
                rule,
                backend,
                grace,
            } => {
                let ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX);
                ("disable", rule, backend, format!(" {ms}"))
            }
            BackendAction::Weight {
                rule,
                backend,
                weight,
            } => ("weight", rule, backend, format!(" {weight}")),
        };
        Ok(format!(
            "backend {verb} {} {}{extra}",
            word(rule, "rule")?,
            word(backend, "backend")?
        ))
    }
}

impl CloseWhich {
    /// The request line.
    pub fn line(&self) -> Result<String, String> {
        if let Some(id) = self.id {
            return Ok(format!("close id {id}"));
        }
        if let Some(c) = &self.client {
            return Ok(format!("close client {}", word(c, "client")?));
        }
        if let Some(r) = &self.rule {
            return Ok(format!("close rule {}", word(r, "rule")?));
        }
        match self.backend.as_deref() {
            Some([rule, backend]) => Ok(format!(
                "close backend {} {}",
                word(rule, "rule")?,
                word(backend, "backend")?
            )),
            _ => Err("say which connections: --id, --client, --rule or --backend".into()),
        }
    }
}
