//! TLS client settings, shared with the WebTorrent load tester: any server certificate
//! is accepted (test trackers use self-signed ones), handshake signatures are still
//! checked.

pub(crate) use shoal_load_test_common::client_config;
