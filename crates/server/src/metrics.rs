//! The Prometheus metrics of `--metrics`, in the text exposition format
//! (0.0.4) on `GET /metrics`.
//!
//! Label sets are bounded by construction: `tool` is a catalog name, `code`
//! an [`ErrorCode`] (empty for a success), the HTTP `code` a status the
//! server itself produced. The series a request touches are resolved once,
//! at start-up, so recording is an atomic add and a histogram bucket; what
//! only a scrape needs (commands, process memory and descriptors) is read
//! when it is scraped.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ctm_exec_runtime::ExecRuntime;
use ctm_transport_http::{Exposition, HttpMetrics};
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts,
    Registry, TextEncoder,
};

use crate::envelope::ErrorCode;

/// The text format 0.0.4, as Prometheus' own Go client names it (the
/// crate's constant leaves out the charset).
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Upper bounds of the tool latency buckets, in seconds: from a cached
/// `read_file` (well under a millisecond) to an `exec_command` that waits
/// out the deployment budget (30 s by default, at most a minute or two).
const LATENCY_BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// The series of one tool.
struct ToolSeries {
    ok: IntCounter,
    latency: Histogram,
}

/// Every metric of the server.
pub struct Metrics {
    registry: Registry,
    tools: HashMap<&'static str, ToolSeries>,
    calls: IntCounterVec,
    latency: HistogramVec,
    http_responses: IntCounterVec,
    http_open: IntGauge,
    commands_active: IntGauge,
    commands_retained: IntGauge,
    output_retained_bytes: IntGauge,
    resident_memory: IntGauge,
    open_fds: IntGauge,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// The registry with every series of `tools` (the enabled catalog) at zero.
    pub fn new(tools: impl Iterator<Item = &'static str>) -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let calls = IntCounterVec::new(
            Opts::new(
                "coding_tools_mcp_tool_calls_total",
                "Tool calls by tool and outcome (ok or error); code is the error code of a failed call, empty for a success.",
            ),
            &["tool", "outcome", "code"],
        )?;
        let latency = HistogramVec::new(
            HistogramOpts::new(
                "coding_tools_mcp_tool_call_duration_seconds",
                "Time from a tool call's validated name to its result, by tool, failures included.",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
            &["tool"],
        )?;
        let http_responses = IntCounterVec::new(
            Opts::new(
                "coding_tools_mcp_http_responses_total",
                "HTTP responses by status code, every route and refusal included.",
            ),
            &["code"],
        )?;
        let gauge = |name: &str, help: &str| IntGauge::new(name, help);
        let http_open = gauge(
            "coding_tools_mcp_http_connections_open",
            "HTTP connections being served now.",
        )?;
        let commands_active = gauge(
            "coding_tools_mcp_commands_active",
            "Commands with a process alive (a running shell, or what it left running).",
        )?;
        let commands_retained = gauge(
            "coding_tools_mcp_commands_retained",
            "Commands whose output the server holds: alive, or finished and readable until pruned.",
        )?;
        let output_retained_bytes = gauge(
            "coding_tools_mcp_command_output_retained_bytes",
            "Bytes of command output held, both streams of every retained command.",
        )?;
        let resident_memory = gauge(
            "process_resident_memory_bytes",
            "Resident memory of the server process in bytes (VmRSS of /proc/self/status).",
        )?;
        let open_fds = gauge(
            "process_open_fds",
            "Open file descriptors of the server process (/proc/self/fd).",
        )?;
        registry.register(Box::new(calls.clone()))?;
        registry.register(Box::new(latency.clone()))?;
        registry.register(Box::new(http_responses.clone()))?;
        for g in [
            &http_open,
            &commands_active,
            &commands_retained,
            &output_retained_bytes,
            &resident_memory,
            &open_fds,
        ] {
            registry.register(Box::new(g.clone()))?;
        }
        let tools = tools
            .map(|name| {
                let series = ToolSeries {
                    ok: calls.with_label_values(&[name, "ok", ""]),
                    latency: latency.with_label_values(&[name]),
                };
                (name, series)
            })
            .collect();
        Ok(Self {
            registry,
            tools,
            calls,
            latency,
            http_responses,
            http_open,
            commands_active,
            commands_retained,
            output_retained_bytes,
            resident_memory,
            open_fds,
        })
    }

    /// Counts one tool call and its duration.
    pub fn tool_call(&self, tool: &'static str, error: Option<ErrorCode>, took: Duration) {
        let secs = took.as_secs_f64();
        match self.tools.get(tool) {
            Some(series) => {
                series.latency.observe(secs);
                if error.is_none() {
                    series.ok.inc();
                }
            }
            // Not in the enabled catalog: cannot be called, but counted all the same.
            None => {
                self.latency.with_label_values(&[tool]).observe(secs);
                if error.is_none() {
                    self.calls.with_label_values(&[tool, "ok", ""]).inc();
                }
            }
        }
        if let Some(code) = error {
            // Failures are rarer than successes: their series are made on
            // first use (at most tools × codes of them).
            self.calls
                .with_label_values(&[tool, "error", code.as_str()])
                .inc();
        }
    }

    /// The exposition now: the scrape-time gauges read, then every series.
    pub fn render(&self, exec: &ExecRuntime) -> Exposition {
        let pool = exec.stats();
        self.commands_active.set(gauge_value(pool.active as u64));
        self.commands_retained
            .set(gauge_value(pool.retained as u64));
        self.output_retained_bytes
            .set(gauge_value(pool.retained_bytes));
        if let Some(rss) = resident_memory_bytes() {
            self.resident_memory.set(gauge_value(rss));
        }
        if let Some(fds) = open_fds() {
            self.open_fds.set(gauge_value(fds));
        }
        let mut body = Vec::with_capacity(16 * 1024);
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut body) {
            // Only a series the registry itself refused could fail here.
            tracing::warn!("metrics exposition failed: {e}");
        }
        Exposition {
            content_type: CONTENT_TYPE,
            body,
        }
    }
}

fn gauge_value(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// `VmRSS` of `/proc/self/status`, in bytes.
#[expect(
    clippy::disallowed_methods,
    reason = "reads the process's own status, not a workspace file"
)]
fn resident_memory_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// Entries of `/proc/self/fd`, less the one listing them.
fn open_fds() -> Option<u64> {
    let entries = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    Some(entries.saturating_sub(1))
}

/// The transport's view of the metrics: its counts go to [`Metrics`], and a
/// scrape renders them with the command pool's state.
pub struct HttpSink {
    pub metrics: Arc<Metrics>,
    pub exec: ExecRuntime,
}

impl HttpMetrics for HttpSink {
    fn connection_opened(&self) {
        self.metrics.http_open.inc();
    }

    fn connection_closed(&self) {
        self.metrics.http_open.dec();
    }

    fn response(&self, status: u16) {
        // Statuses are the server's own (a fixed set of refusals and
        // answers), so the label stays bounded.
        let mut digits = [0u8; 3];
        self.metrics
            .http_responses
            .with_label_values(&[status_label(status, &mut digits)])
            .inc();
    }

    fn render(&self) -> Exposition {
        self.metrics.render(&self.exec)
    }
}

/// A status as its three digits, without an allocation per response.
fn status_label(status: u16, digits: &mut [u8; 3]) -> &str {
    let s = status.min(999);
    *digits = [
        b'0' + (s / 100) as u8,
        b'0' + (s / 10 % 10) as u8,
        b'0' + (s % 10) as u8,
    ];
    std::str::from_utf8(digits).unwrap_or("000")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape(m: &Metrics) -> String {
        let mut body = Vec::new();
        TextEncoder::new()
            .encode(&m.registry.gather(), &mut body)
            .unwrap();
        String::from_utf8(body).unwrap()
    }

    #[test]
    fn tool_calls_by_outcome_and_code() {
        let m = Metrics::new(["read_file", "exec_command"].into_iter()).unwrap();
        m.tool_call("read_file", None, Duration::from_millis(2));
        m.tool_call("read_file", None, Duration::from_millis(3));
        m.tool_call(
            "read_file",
            Some(ErrorCode::NotFound),
            Duration::from_millis(1),
        );
        let text = scrape(&m);
        assert!(text.contains(
            "coding_tools_mcp_tool_calls_total{code=\"\",outcome=\"ok\",tool=\"read_file\"} 2"
        ));
        assert!(text.contains(
            "coding_tools_mcp_tool_calls_total{code=\"NOT_FOUND\",outcome=\"error\",tool=\"read_file\"} 1"
        ));
        assert!(text.contains(
            "coding_tools_mcp_tool_calls_total{code=\"\",outcome=\"ok\",tool=\"exec_command\"} 0"
        ));
        assert!(
            text.contains(
                "coding_tools_mcp_tool_call_duration_seconds_count{tool=\"read_file\"} 3"
            )
        );
        assert!(text.contains(
            "coding_tools_mcp_tool_call_duration_seconds_bucket{tool=\"read_file\",le=\"0.0025\"} 2"
        ));
    }

    #[test]
    fn status_labels() {
        let mut d = [0u8; 3];
        assert_eq!(status_label(200, &mut d), "200");
        assert_eq!(status_label(404, &mut d), "404");
        assert_eq!(status_label(1200, &mut d), "999");
    }

    #[test]
    fn process_readings() {
        assert!(resident_memory_bytes().is_some_and(|b| b > 0));
        assert!(open_fds().is_some_and(|n| n >= 3));
    }
}
