//! What every listener and connection of one server shares: the settings from
//! the command line, the buffer and pipe pools, and the connection log.

use crate::buffers::BufferPool;
use crate::config::SpliceMode;
use crate::logfile::LogHandle;
use crate::pipes::{self, PipePool};
use std::sync::Arc;
use std::time::Duration;

/// Engine settings from the command line.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Size of each copy buffer (`--buffer-size`).
    pub buffer_size: usize,
    /// Per-address backend connect timeout (`--connect-timeout`).
    pub connect_timeout: Duration,
    /// Idle limit for half-closed connections (`--half-close-timeout`).
    pub half_close_idle: Duration,
    /// Whether connections splice (`--splice`); a rule's `[splice=...]` overrides it.
    pub splice: SpliceMode,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            buffer_size: 64 * 1024,
            connect_timeout: Duration::from_secs(10),
            half_close_idle: Duration::from_secs(60),
            splice: SpliceMode::Auto,
        }
    }
}

/// Copy buffers kept for reuse: enough for a burst of busy directions.
const BUFFERS_KEPT: usize = 1024;

/// Datagram buffers kept for reuse by the UDP paths.
const DATAGRAM_BUFFERS_KEPT: usize = 256;

/// Size of every datagram buffer: larger than any UDP payload (the largest is
/// 65,507 bytes over IPv4), whatever `--buffer-size` says.
pub(crate) const DATAGRAM_BUFFER: usize = 65_536;

/// State shared by every listener and connection of one server.
pub struct Shared {
    /// Command-line settings.
    pub settings: Settings,
    /// Copy buffers for TCP, recycled between connections.
    pub buffers: BufferPool,
    /// Pipes for splice, recycled between connections.
    pub pipes: PipePool,
    /// Datagram-sized buffers for the UDP paths, recycled between datagrams.
    pub datagrams: BufferPool,
    /// Where rinetd log events go.
    pub log: LogHandle,
}

impl Shared {
    /// Shared state for a server with these settings and log.
    pub fn new(settings: Settings, log: LogHandle) -> Arc<Self> {
        Arc::new(Shared {
            buffers: BufferPool::new(settings.buffer_size, BUFFERS_KEPT),
            pipes: PipePool::new(pipes::pipe_size(settings.buffer_size), pipes::PIPES_KEPT),
            datagrams: BufferPool::new(DATAGRAM_BUFFER, DATAGRAM_BUFFERS_KEPT),
            settings,
            log,
        })
    }
}
