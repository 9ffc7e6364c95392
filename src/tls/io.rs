//! rustls over oi's reactor sockets: a socket seen as blocking `Read` and
//! `Write` that turn "not ready" into `WouldBlock` (and have registered the
//! task's waker), which is what rustls's `read_tls` and `write_tls` take;
//! and the handshakes, with the reason a failed one gives.

use oi_runtime::reactor::Async;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, Connection, DigitallySignedStruct, SignatureScheme};
use std::future::poll_fn;
use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// A reactor socket as `Read` + `Write` for one poll: `WouldBlock` means
/// the socket is not ready and the task will be woken when it is.
pub(crate) struct Polled<'a, 'b> {
    /// The socket.
    pub(crate) socket: &'a Async<TcpStream>,
    /// The poll's context, whose waker the reactor keeps.
    pub(crate) cx: &'a mut Context<'b>,
}

/// A poll's outcome as `std::io`'s: `Pending` is `WouldBlock`.
fn ready<T>(p: Poll<io::Result<T>>) -> io::Result<T> {
    match p {
        Poll::Ready(r) => r,
        Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
    }
}

impl Read for Polled<'_, '_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut socket = self.socket;
        ready(futures_lite::AsyncRead::poll_read(
            Pin::new(&mut socket),
            self.cx,
            buf,
        ))
    }
}

/// Passes of [`Polled::write_vectored`] before it lets other tasks run:
/// each pass takes a readiness edge, so more than two mean the socket keeps
/// saying writable and refusing (never seen; bounded all the same).
const WRITE_PASSES: usize = 4;

impl Write for Polled<'_, '_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[IoSlice::new(buf)])
    }

    /// Every record rustls holds in one sendmsg(2): a server's first flight
    /// (ServerHello to Finished, four records) and its two session tickets
    /// each go out in one call instead of one call per record (std's default
    /// writes only the first slice). MSG_NOSIGNAL: a peer gone is an error,
    /// not SIGPIPE, as `tcp::copy`'s send.
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        for _ in 0..WRITE_PASSES {
            let sent = rustix::net::sendmsg(
                self.socket.get_ref(),
                bufs,
                &mut rustix::net::SendAncillaryBuffer::default(),
                rustix::net::SendFlags::NOSIGNAL,
            );
            match sent {
                Ok(n) => return Ok(n),
                Err(rustix::io::Errno::INTR) => {}
                Err(e) if e == rustix::io::Errno::AGAIN => {
                    // Full: wait for room, or try again at once if room came.
                    match self.socket.poll_writable(self.cx) {
                        Poll::Ready(Ok(())) => {}
                        Poll::Ready(Err(e)) => return Err(e),
                        Poll::Pending => return Err(io::ErrorKind::WouldBlock.into()),
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        // Budget spent: run again after the others.
        self.cx.waker().wake_by_ref();
        Err(io::ErrorKind::WouldBlock.into())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Writes what `conn` has to send until it has nothing or the socket is
/// full (`Pending`, the waker registered).
pub(crate) fn poll_flush(
    conn: &mut Connection,
    socket: &Async<TcpStream>,
    cx: &mut Context<'_>,
) -> Poll<io::Result<()>> {
    // Bounded: each pass sends at least one byte or returns.
    while conn.wants_write() {
        match conn.write_tls(&mut Polled { socket, cx }) {
            Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
            Err(e) => return Poll::Ready(Err(e)),
        }
    }
    Poll::Ready(Ok(()))
}

/// Reads TLS records from the socket into `conn` and processes them:
/// `Ok(true)` when some were read, `Ok(false)` at the end of the stream.
/// A record rustls refuses is an error, its alert queued for the peer.
pub(crate) fn poll_fill(
    conn: &mut Connection,
    socket: &Async<TcpStream>,
    cx: &mut Context<'_>,
) -> Poll<io::Result<bool>> {
    match conn.read_tls(&mut Polled { socket, cx }) {
        Ok(0) => Poll::Ready(Ok(false)),
        Ok(_) => match conn.process_new_packets() {
            Ok(_) => Poll::Ready(Ok(true)),
            Err(e) => {
                // Tell the peer why (the alert), as far as the socket takes it.
                let _ = poll_flush(conn, socket, cx);
                Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, e)))
            }
        },
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Poll::Pending,
        Err(e) => Poll::Ready(Err(e)),
    }
}

/// Runs `conn`'s handshake on `socket` to its end.
pub(crate) async fn handshake(conn: &mut Connection, socket: &Async<TcpStream>) -> io::Result<()> {
    poll_fn(|cx| {
        // Bounded: each pass writes, or reads a record, or returns.
        loop {
            match poll_flush(conn, socket, cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                // The peer has not read what was sent: wait for room.
                Poll::Pending => return Poll::Pending,
            }
            if !conn.is_handshaking() {
                return Poll::Ready(Ok(()));
            }
            match poll_fill(conn, socket, cx) {
                Poll::Ready(Ok(true)) => {}
                Poll::Ready(Ok(false)) => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "peer closed during the handshake",
                    )))
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
    })
    .await
}

/// Why a handshake failed, in words a log reader acts on: the backend's
/// certificate's problem when that was it.
pub(crate) fn reason(e: &io::Error) -> String {
    let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) else {
        return e.to_string();
    };
    match tls {
        rustls::Error::InvalidCertificate(c) => match c {
            CertificateError::UnknownIssuer => "untrusted CA (unknown issuer)".into(),
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                "wrong name (certificate not valid for the name asked)".into()
            }
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                "expired certificate".into()
            }
            other => format!("invalid certificate: {other:?}"),
        },
        other => other.to_string(),
    }
}

/// `tls-insecure`: every backend certificate accepted, signatures still
/// checked so the handshake itself is sound.
#[derive(Debug)]
pub(crate) struct AnyCertificate(pub(crate) Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
