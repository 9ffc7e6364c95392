//! oi's codecs for bytes that come from outside: the PROXY protocol header
//! (v1 and v2, encode and a bounded incremental decode), the TLS ClientHello
//! reader (to the `server_name` extension) and the server-name patterns
//! rules match it with, and the control socket's and metrics endpoint's
//! request parsers.
//!
//! Pure: no I/O, no allocation beyond what a parse returns, every length
//! read from the wire checked before it is used. The fuzz targets
//! (`fuzz/`) drive these functions directly.
#![forbid(unsafe_code)]

pub mod admin;
pub mod client_hello;
pub mod proxy;
pub mod request;
