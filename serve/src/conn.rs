//! Accepting connections: HTTP/1.1 on hyper, each connection with its timeouts, a cap on how
//! many are open, and graceful shutdown (no new connections; open ones finish their requests).
//!
//! Timeouts, so a slow or stalled client cannot hold a connection forever:
//! - headers must arrive within `read_timeout`, which hyper also applies to an idle keep-alive
//!   connection waiting for its next request (slowloris on headers, idle sockets);
//! - a body must arrive within `read_timeout` (handlers read it under that deadline: 408);
//! - a client that stops reading a response for `write_timeout` is dropped ([`Stalls`]).

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::time::Sleep;

use crate::metrics::Metrics;

pub struct Limits {
    pub read_timeout: Duration,
    pub write_timeout: Duration,
    pub max_connections: usize,
}

/// Accepts connections until `stop` turns true, then asks every open connection to finish
/// its in-flight request and close; returns the handle that resolves when all have.
pub async fn accept_loop(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    metrics: Arc<Metrics>,
    mut stop: watch::Receiver<bool>,
) -> GracefulShutdown {
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    loop {
        // A connection beyond the cap waits in the kernel's backlog until one closes.
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            _ = stopped(&mut stop) => break,
        };
        let stream = tokio::select! {
            a = listener.accept() => match a {
                Ok((s, _)) => s,
                // Out of file descriptors and the like: wait a little, then go on.
                Err(_) => { tokio::time::sleep(Duration::from_millis(50)).await; continue; }
            },
            _ = stopped(&mut stop) => break,
        };
        let _ = stream.set_nodelay(true);
        metrics.connections_total.fetch_add(1, Ordering::Relaxed);
        metrics.connections_open.fetch_add(1, Ordering::Relaxed);
        let io = TokioIo::new(Stalls::new(stream, limits.write_timeout));
        let svc = TowerToHyperService::new(router.clone());
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.read_timeout)
            .keep_alive(true)
            .serve_connection(io, svc);
        let conn = graceful.watch(conn);
        let m = metrics.clone();
        tokio::spawn(async move {
            let _ = conn.await;
            m.connections_open.fetch_sub(1, Ordering::Relaxed);
            drop(permit);
        });
    }
    graceful
}

/// Resolves once `stop` is true (the guard `wait_for` returns is not `Send`: dropped here).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await.map(|_| ());
}

/// A TCP stream whose writes fail with `TimedOut` once one has waited `timeout` for the
/// client to take bytes: a client that stops reading a stream cannot hold its connection.
pub struct Stalls {
    inner: TcpStream,
    timeout: Duration,
    stalled: Option<Pin<Box<Sleep>>>,
}

impl Stalls {
    pub fn new(inner: TcpStream, timeout: Duration) -> Stalls {
        Stalls {
            inner,
            timeout,
            stalled: None,
        }
    }

    fn on_write<T>(&mut self, cx: &mut Context<'_>, r: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match r {
            Poll::Ready(r) => {
                self.stalled = None;
                Poll::Ready(r)
            }
            Poll::Pending => {
                let timeout = self.timeout;
                let s = self
                    .stalled
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                match s.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the client stopped reading",
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl AsyncRead for Stalls {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Stalls {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.on_write(cx, r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.on_write(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.on_write(cx, r)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
