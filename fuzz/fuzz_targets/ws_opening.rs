//! Any bytes: reading a WebSocket opening request never panics; a complete one never
//! claims more bytes than it was given, and every answer is a whole HTTP response.
//! The first byte says whether the connection is from a trusted proxy (its
//! `X-Forwarded-For` read, the first or the last address): then an upgrade always
//! names a client, and otherwise never. Its bit 3 turns private mode on: a key digest
//! comes back only then. An Origin comes back lowercase and bounded, `deny *` refuses
//! exactly the upgrades that have one, and other rules never panic on it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_private::KeyPlaces;
use shoal_ws_protocol::opening::{OpenedKind, OpeningLimits, ProxyHeader, parse_opening};
use shoal_ws_protocol::origin::{MAX_ORIGIN_LEN, OriginRules};

static NO_BROWSERS: std::sync::LazyLock<OriginRules> =
    std::sync::LazyLock::new(|| OriginRules::parse("deny *\n").unwrap());
static SITES: std::sync::LazyLock<OriginRules> = std::sync::LazyLock::new(|| {
    OriginRules::parse("allow https://a.example\nallow *.b.example\nallow c.example\ndeny null\n")
        .unwrap()
});

fuzz_target!(|input: &[u8]| {
    let Some((&mode, data)) = input.split_first() else {
        return;
    };
    let limits = OpeningLimits {
        max_size: 4096,
        health_check_path: "/health",
        proxy_header: (mode % 3 != 0).then_some(ProxyHeader {
            name: "X-Forwarded-For",
            use_last: mode % 3 == 2,
        }),
        private: (mode & 8 != 0).then_some(KeyPlaces {
            paths: &["/announce"],
            parameter: "passkey",
            bare: true,
        }),
    };
    match parse_opening(data, &limits) {
        Ok(Some(opened)) => {
            assert!(opened.len <= data.len());
            let upgrade_through_proxy =
                opened.kind == OpenedKind::Upgrade && limits.proxy_header.is_some();
            assert_eq!(opened.forwarded_ip.is_some(), upgrade_through_proxy);
            assert!(opened.key.is_none() || limits.private.is_some());
            assert!(opened.response.starts_with(b"HTTP/1.1 "));
            assert!(opened.response.windows(4).any(|w| w == b"\r\n\r\n"));
            let origin = opened.origin.as_deref();
            if let Some(origin) = origin {
                assert!(origin.len() <= MAX_ORIGIN_LEN);
                assert!(!origin.bytes().any(|b| b.is_ascii_uppercase() || !b.is_ascii()));
            }
            assert_eq!(NO_BROWSERS.check(origin).is_err(), origin.is_some());
            let _ = SITES.check(origin);
        }
        Ok(None) => assert!(data.len() < limits.max_size),
        Err(refusal) => {
            assert!((400..600).contains(&refusal.status));
            assert!(refusal.response().starts_with(b"HTTP/1.1 "));
        }
    }
});
