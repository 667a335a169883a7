//! What every TCP tracker counts about its connections and clients: one set of
//! counters, embedded in each tracker's own (`group connections: ConnectionCounters;`)
//! and observed here once, so the HTTP and WebTorrent trackers name them alike.

use shoal_common::metric_names::{
    BANS, BANS_HELP, CONNECTIONS, CONNECTIONS_HELP, ERRORS, ERRORS_HELP, OPEN_CONNECTIONS,
    OPEN_CONNECTIONS_HELP, REFUSED, REFUSED_HELP,
};
use shoal_common::{Observation, Observe};

/// TLS handshakes by kind (full, resumed).
const TLS_HANDSHAKES: &str = "shoal_tls_handshakes";
/// CPU time of TLS handshakes.
const TLS_HANDSHAKE_SECONDS: &str = "shoal_tls_handshake_seconds";
/// The end of the certificate in force.
const CERTIFICATE_EXPIRY: &str = "shoal_tls_certificate_expiry_timestamp_seconds";
/// ACME orders by result.
const ACME_ORDERS: &str = "shoal_acme_orders";
/// ACME validation connections.
const ACME_VALIDATIONS: &str = "shoal_acme_validations";

shoal_common::counters! {
    /// Connections and clients, counted by each socket worker of a TCP tracker.
    pub struct ConnectionCounters, SharedConnectionCounters, ConnectionTotals {
        /// Connections accepted.
        accepted,
        /// Connections refused at network.max_connections with none to give way.
        refused,
        /// Connections refused: their client had per_ip.max_connections open, their
        /// network per_ip.max_connections_per_network, or their client its most TLS
        /// handshakes under way.
        refused_per_ip,
        /// The connection quiet the longest closed to make room for a newcomer at
        /// network.max_connections, and TLS handshakes closed for a newcomer past
        /// network.max_tls_handshakes (the one under way longest).
        idle_evicted,
        /// Requests refused: their client was over per_ip.requests_per_second.
        per_ip_limited,
        /// Connections and requests of banned clients, dropped.
        banned,
        /// Bans started.
        bans,
        /// Failed TLS handshakes.
        tls_failures,
        /// TLS handshakes completed in full (a signature and a key exchange).
        tls_full,
        /// TLS handshakes that resumed a session (from a ticket or the session cache).
        tls_resumed,
        /// Microseconds the socket worker spent computing TLS handshakes (inside
        /// them, not waiting for the client), failed ones included.
        tls_handshake_micros,
        /// Requests answered "busy" because a swarm worker's queue was full.
        shed,
        /// Connections that negotiated ACME's validation protocol (acme-tls/1): the
        /// CA checking a challenge, closed after the handshake.
        acme_validations,
        /// Connections open now (a gauge: set, not added).
        open,
        /// The end of the TLS certificate in force, in seconds since the Unix epoch
        /// (a gauge, set by the first socket worker only; 0: none).
        certificate_expiry,
        /// Certificates obtained from the ACME CA (set by the first socket worker only).
        acme_issued,
        /// Failed attempts to obtain one (set by the first socket worker only).
        acme_failed,
    }
}

impl SharedConnectionCounters {
    /// Sets the gauge of open connections.
    pub fn set_open(&self, open: usize) {
        self.open
            .store(open as u64, std::sync::atomic::Ordering::Relaxed);
    }

    /// Sets the certificate's end and ACME's counts from `tls`; one socket worker
    /// calls this, the others leave theirs at 0.
    pub fn set_certificate(&self, tls: &crate::TlsConfig) {
        use std::sync::atomic::Ordering::Relaxed;
        self.certificate_expiry.store(tls.expiry(), Relaxed);
        if let Some(acme) = tls.acme_status() {
            self.acme_issued.store(acme.issued.load(Relaxed), Relaxed);
            self.acme_failed.store(acme.failed.load(Relaxed), Relaxed);
        }
    }
}

impl Observe for ConnectionTotals {
    fn observe(&self, out: &mut Observation) {
        for (reason, value) in [
            ("rate_limit", self.per_ip_limited),
            ("banned", self.banned),
            ("shed", self.shed),
            ("connection_limit", self.refused),
            ("connection_limit_per_ip", self.refused_per_ip),
        ] {
            out.counter(REFUSED, REFUSED_HELP, &[("reason", reason)], value);
        }
        for (kind, value) in [
            ("tls_handshake", self.tls_failures),
            ("idle_evicted", self.idle_evicted),
        ] {
            out.counter(ERRORS, ERRORS_HELP, &[("kind", kind)], value);
        }
        for (kind, value) in [("full", self.tls_full), ("resumed", self.tls_resumed)] {
            out.counter(
                TLS_HANDSHAKES,
                "TLS handshakes completed, full or resumed (from a session ticket or the session cache).",
                &[("kind", kind)],
                value,
            );
        }
        out.counter_seconds(
            TLS_HANDSHAKE_SECONDS,
            "Seconds socket workers spent computing TLS handshakes (their CPU, not the waits for clients).",
            self.tls_handshake_micros as f64 / 1e6,
        );
        out.gauge(
            CERTIFICATE_EXPIRY,
            "When the TLS certificate in force ends, in seconds since the Unix epoch (0: no TLS, or no certificate yet).",
            &[],
            self.certificate_expiry as f64,
        );
        if self.acme_issued + self.acme_failed + self.acme_validations > 0 {
            for (result, value) in [("issued", self.acme_issued), ("failed", self.acme_failed)] {
                out.counter(
                    ACME_ORDERS,
                    "Certificate orders to the ACME CA, by result (a failed one is retried with backoff).",
                    &[("result", result)],
                    value,
                );
            }
            out.counter(
                ACME_VALIDATIONS,
                "Connections of the ACME CA validating a challenge (TLS-ALPN-01).",
                &[],
                self.acme_validations,
            );
        }
        out.counter(BANS, BANS_HELP, &[], self.bans);
        out.counter(CONNECTIONS, CONNECTIONS_HELP, &[], self.accepted);
        out.gauge(
            OPEN_CONNECTIONS,
            OPEN_CONNECTIONS_HELP,
            &[],
            self.open as f64,
        );
    }
}

impl ConnectionTotals {
    /// The part of a statistics line about connections and clients, for the interval
    /// `self` (a difference of snapshots) with `open` connections now.
    pub fn line(&self, open: u64) -> String {
        format!(
            "open connections {open}, TLS handshakes {} ({} resumed, {:.0} us each), TLS failures {}, quiet connections closed for newcomers {}, \
             refused connections {} (per client {}), rate-limited {}, banned {}, new bans {}, busy {}",
            self.tls_full + self.tls_resumed,
            self.tls_resumed,
            self.tls_handshake_micros as f64 / (self.tls_full + self.tls_resumed).max(1) as f64,
            self.tls_failures,
            self.idle_evicted,
            self.refused,
            self.refused_per_ip,
            self.per_ip_limited,
            self.banned,
            self.bans,
            self.shed,
        )
    }
}
