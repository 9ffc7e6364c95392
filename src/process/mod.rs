//! The process around the data path: the command line and its validation
//! (`cli`), `--check` (`check`), and the service (`service`: start-up order,
//! signals, reload, drain, upgrade). It sits above every other module and
//! nothing below imports it.

pub mod check;
pub mod cli;
pub(crate) mod service;
#[cfg(test)]
mod tests_safe_fs;
