//! The names of the metric families more than one tracker writes, with their help
//! lines, so the trackers and the monitoring endpoint cannot spell one differently.
//! (A family only one tracker writes is named where it is written.)

/// The request-latency histogram.
pub const LATENCY: &str = "shoal_request_duration_seconds";
/// Its help line.
pub const LATENCY_HELP: &str = "Time from reading a request to handing its response to the kernel (UDP: per batch, from the read of the batch).";

/// The family of every refusal, by reason.
pub const REFUSED: &str = "shoal_refused";
/// Its help line.
pub const REFUSED_HELP: &str = "Requests or connections refused or dropped on purpose, by reason (limits, access list, bad input).";
/// Announces by client software (`shoal_common::KNOWN_CLIENTS`, or "other").
pub const ANNOUNCES_BY_CLIENT: &str = "shoal_announces_by_client";
/// Its help line.
pub const ANNOUNCES_BY_CLIENT_HELP: &str = "Announces by client software, told by the start of the peer id (\"other\": none of those known).";
/// The family of requests by action.
pub const REQUESTS: &str = "shoal_requests";
/// Its help line.
pub const REQUESTS_HELP: &str = "Requests received, by action.";
/// The family of responses by action.
pub const RESPONSES: &str = "shoal_responses";
/// Its help line.
pub const RESPONSES_HELP: &str = "Responses sent, by action (error: an error reply).";
/// The family of failures that are not refusals.
pub const ERRORS: &str = "shoal_errors";
/// Its help line.
pub const ERRORS_HELP: &str = "Failures that are not refusals, by kind (send failures, timeouts, TLS handshakes, slow readers).";
/// Bans started.
pub const BANS: &str = "shoal_bans";
/// Its help line.
pub const BANS_HELP: &str = "Temporary bans started (sustained abuse from a proven address).";
/// Connections accepted.
pub const CONNECTIONS: &str = "shoal_connections_accepted";
/// Its help line.
pub const CONNECTIONS_HELP: &str = "TCP connections accepted.";
/// Peers held over all torrents (the memory thread watches it too).
pub const PEERS: &str = "shoal_peers";
/// Connections open now.
pub const OPEN_CONNECTIONS: &str = "shoal_connections_open";
/// Its help line.
pub const OPEN_CONNECTIONS_HELP: &str = "TCP connections open now.";
/// Bytes waiting to be written to WebTorrent connections.
pub const OUTGOING_BYTES: &str = "shoal_outgoing_bytes";
/// Its help line.
pub const OUTGOING_BYTES_HELP: &str =
    "Bytes waiting to be written to connections now, writes under way included (ws).";
/// Bytes of WebTorrent messages still arriving.
pub const INCOMING_BYTES: &str = "shoal_incoming_bytes";
/// Its help line.
pub const INCOMING_BYTES_HELP: &str =
    "Bytes of messages still arriving from connections now, not yet whole (ws).";
