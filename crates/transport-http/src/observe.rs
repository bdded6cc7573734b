//! What the transport reports when the server collects metrics, and the
//! exposition it serves on `GET /metrics`. The transport knows no metrics
//! library: the composition root implements [`HttpMetrics`].

use std::sync::Arc;

/// Receives the transport's counts and renders the exposition.
///
/// [`Self::connection_opened`], [`Self::connection_closed`] and
/// [`Self::response`] run on every connection and request: they must be
/// cheap (an atomic add), never block, never do I/O.
pub trait HttpMetrics: Send + Sync {
    /// A connection was accepted and is being served.
    fn connection_opened(&self);
    /// A connection counted by [`Self::connection_opened`] ended.
    fn connection_closed(&self);
    /// A response with this status was produced (every route, refusals
    /// included).
    fn response(&self, status: u16);
    /// The whole exposition, rendered at scrape time.
    fn render(&self) -> Exposition;
}

/// One scrape's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exposition {
    /// Its `Content-Type` (for the Prometheus text format,
    /// `text/plain; version=0.0.4; charset=utf-8`).
    pub content_type: &'static str,
    /// The exposition text.
    pub body: Vec<u8>,
}

/// The metrics the transport reports to; when [`crate::HttpConfig::metrics`]
/// is `None` nothing is counted and `/metrics` is not a route.
#[derive(Clone)]
pub struct MetricsSink(pub Arc<dyn HttpMetrics>);

impl std::fmt::Debug for MetricsSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MetricsSink")
    }
}

/// Counts one open connection for as long as it lives.
pub(crate) struct OpenConnection(Option<MetricsSink>);

impl OpenConnection {
    pub(crate) fn new(sink: Option<&MetricsSink>) -> Self {
        if let Some(s) = sink {
            s.0.connection_opened();
        }
        Self(sink.cloned())
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        if let Some(s) = &self.0 {
            s.0.connection_closed();
        }
    }
}
