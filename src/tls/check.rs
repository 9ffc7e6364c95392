//! `--check`'s (and a reload's) reading of every rule's TLS files, and the
//! warnings about TLS that loads.

use super::{files, Files};
use oi_config::{ConfigError, ConfigErrors, ResolvedConfig, ResolvedRule, RuleOptions};
use std::time::SystemTime;

/// Checks the TLS files of every rule of `cfg` as start-up and a reload
/// would read them: every bad rule at once, each at its file and line.
/// Returns the warnings (a key others may read, a certificate about to
/// expire, `tls-insecure`), each at its rule's line.
pub(crate) fn check(cfg: &ResolvedConfig, file: &str) -> Result<Vec<ConfigError>, ConfigErrors> {
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    let mut loaded = Files::default();
    let mut warned = std::collections::HashSet::new();
    let rules = cfg
        .rules
        .iter()
        .flat_map(|r| std::iter::once(r).chain(r.sni.iter()));
    for rule in rules {
        let s = rule.settings();
        if !super::names_tls(&s) {
            continue;
        }
        // A port range's ports are one line: its files read and its
        // warnings given once.
        let first = warned.insert((rule.rule.file.clone(), rule.rule.line));
        match loaded.for_rule(rule, &s) {
            Ok(_) if first => {
                warnings.extend(rule_warnings(&s).into_iter().map(|w| at(rule, w)));
            }
            Err(e) if first => errors.push(at(rule, e)),
            _ => {}
        }
        if errors.len() >= oi_config::MAX_ERRORS {
            break;
        }
    }
    if errors.is_empty() {
        return Ok(warnings);
    }
    Err(ConfigErrors {
        file: file.to_string(),
        errors,
        omitted: 0,
    })
}

/// What `--check` warns about in a rule's TLS that loads.
fn rule_warnings(s: &RuleOptions) -> Vec<String> {
    let mut out = Vec::new();
    if s.tls_insecure == Some(true) && s.tls_connect == Some(true) {
        out.push(
            "tls-insecure: the backend's certificate is not verified; anyone on \
             the path can pretend to be it"
                .to_string(),
        );
    }
    if let Some(fault) = s
        .tls_ocsp
        .as_deref()
        .and_then(|p| files::ocsp(p).ok().map(|der| (p, der)))
        .and_then(|(p, der)| files::ocsp_fault(&der).map(|f| (p, f)))
    {
        out.push(format!("tls-ocsp {}: {}", fault.0.display(), fault.1));
    }
    for key in [&s.tls_key, &s.tls_client_key].into_iter().flatten() {
        out.extend(files::key_exposed(key));
    }
    for cert in [&s.tls_cert, &s.tls_client_cert].into_iter().flatten() {
        let Ok(chain) = files::certs(cert, "certificate") else {
            continue;
        };
        let Some(ends) = chain.first().and_then(|c| files::not_after(c)) else {
            continue;
        };
        match ends.duration_since(SystemTime::now()) {
            Err(_) => out.push(format!("certificate {} has expired", cert.display())),
            Ok(left) if left < files::EXPIRY_WARNING => out.push(format!(
                "certificate {} expires in {} days",
                cert.display(),
                left.as_secs() / 86_400
            )),
            Ok(_) => {}
        }
    }
    out
}

/// `message` at `rule`'s file and line.
fn at(rule: &ResolvedRule, message: String) -> ConfigError {
    ConfigError {
        file: rule.rule.file.clone(),
        line: rule.rule.line,
        column: 0,
        message,
        text: String::new(),
        more: 0,
    }
}
