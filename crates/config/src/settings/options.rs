//! A rule's options as the rule stores them ([`Options`]): shared, and
//! nothing at all when none is written.
//!
//! Here, beside the table's [`RuleOptions`] it wraps, not in `model.rs` with
//! the rest of a rule: the table stores into `model`'s [`Globals`] and reads
//! its `Format` and `Algorithm`, so `model` is below the settings, and this
//! wrapper of a settings type cannot be in it.
//!
//! [`Globals`]: crate::Globals

use super::RuleOptions;
use std::fmt;
use std::sync::Arc;

/// A rule's bracketed options as a [`Rule`](crate::Rule) stores them: nothing
/// when none is written (most rules), else one shared [`RuleOptions`]. It
/// reads and writes as a `RuleOptions` (`rule.options.timeout`); a write to
/// a shared record copies it first. Inline, the 320-byte struct was most of
/// a rule's 688 bytes; boxed per rule, 16 MiB of rules with long
/// `check-send`/`check-expect` text held about 700 bytes of options per
/// rule. Shared, the ports of a range and consecutive rules with the same
/// options hold one record ([`Options::shared_with`]).
#[derive(Clone, Default)]
pub struct Options(Option<Arc<RuleOptions>>);

/// What an [`Options`] holding nothing reads as.
static NO_OPTIONS: RuleOptions = RuleOptions::NONE;

impl std::ops::Deref for Options {
    type Target = RuleOptions;

    fn deref(&self) -> &RuleOptions {
        self.0.as_deref().unwrap_or(&NO_OPTIONS)
    }
}

impl std::ops::DerefMut for Options {
    /// The first write stores a `RuleOptions`; a write to a shared one copies it.
    fn deref_mut(&mut self) -> &mut RuleOptions {
        Arc::make_mut(self.0.get_or_insert_with(Arc::default))
    }
}

impl From<RuleOptions> for Options {
    fn from(o: RuleOptions) -> Self {
        Options((o != RuleOptions::NONE).then(|| Arc::new(o)))
    }
}

impl Options {
    /// `o` as stored, sharing `last`'s record when it reads the same: what
    /// a parser calls with the previous rule's options, so the ports of a
    /// range and runs of rules written alike hold one record.
    pub fn shared_with(o: RuleOptions, last: &Options) -> Self {
        match &last.0 {
            Some(shared) if **shared == o => Options(Some(shared.clone())),
            _ => o.into(),
        }
    }
}

impl PartialEq for Options {
    /// Equal when the options read the same, stored or not.
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for Options {}

impl PartialEq<RuleOptions> for Options {
    fn eq(&self, other: &RuleOptions) -> bool {
        **self == *other
    }
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

impl fmt::Display for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}
