//! The byte plumbing every connection shares, below everything that
//! forwards: the buffer and pipe pools, who a peer is, and byte budgets
//! with once-a-period warnings. Nothing here knows a rule or a route.

pub(crate) mod bounds;
pub(crate) mod buffers;
pub(crate) mod peer;
pub(crate) mod pipes;
