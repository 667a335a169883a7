use std::sync::Arc;

use serde_json::Value;
use shoal_common::{AccessControl, AccessList, AccessListMode, ClientRules};
use shoal_private::{KeyDigest, Passkey, Refusal, Registry, Torrent};

use super::*;
use crate::admin::AdminTarget;

const TOKEN: &str = "0123456789abcdef0123456789abcdef";
const ALICE: &str = "6f0d1b2c3d4e5f60718293a4b5c6d7e8";
const BOB: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f90";
const HASH: &str = "0123456789abcdef0123456789abcdef01234567";
const OTHER: &str = "89abcdef0123456789abcdef0123456789abcdef";

/// An API over a private UDP tracker and a public HTTP one with an allow list, both
/// sharing nothing else.
/// A UDP tracker's interval: 1,800 s at rest, up to 10,800.
fn interval() -> Arc<shoal_worker::AnnounceInterval> {
    Arc::new(shoal_worker::AnnounceInterval::new(
        shoal_worker::IntervalSettings::adaptive(1800, 10_800),
    ))
}

fn api() -> (AdminApi, Arc<Registry>, Arc<AccessControl>) {
    let registry =
        Arc::new(Registry::parse(&format!("17 {ALICE}\n"), &format!("{HASH} 1001\n")).unwrap());
    let list = Arc::new(AccessControl::with_list(
        AccessListMode::Allow,
        AccessList::parse(HASH).unwrap(),
    ));
    let rules = Arc::new(ClientRules::default());
    let targets = vec![
        AdminTarget {
            protocol: "udp",
            access: Arc::new(AccessControl::with_list(
                AccessListMode::Off,
                AccessList::default(),
            )),
            clients: rules.clone(),
            registry: Some(registry.clone()),
            accounts: None,
            interval: Some(interval()),
        },
        AdminTarget {
            protocol: "http",
            access: list.clone(),
            clients: rules.clone(),
            registry: None,
            accounts: None,
            interval: None,
        },
    ];
    (
        AdminApi::new(KeyDigest::of_secret(TOKEN.as_bytes()), targets),
        registry,
        list,
    )
}

/// Status and JSON body of the answer to `method path` with `body`.
fn call(api: &mut AdminApi, method: &str, path: &str, body: &str) -> (u16, Value) {
    call_with(
        api,
        method,
        path,
        &format!("Authorization: Bearer {TOKEN}\r\n"),
        body,
    )
}

fn call_with(
    api: &mut AdminApi,
    method: &str,
    path: &str,
    headers: &str,
    body: &str,
) -> (u16, Value) {
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\n{headers}Content-Length: {}\r\n\r\n",
        body.len()
    );
    let answer = String::from_utf8(api.respond(head.as_bytes(), body.as_bytes())).unwrap();
    let status = answer[9..12].parse().unwrap();
    let (_, json) = answer.split_once("\r\n\r\n").unwrap();
    (status, serde_json::from_str(json).unwrap())
}

fn key(text: &str) -> Option<KeyDigest> {
    Passkey::new(text.as_bytes()).map(Passkey::digest)
}

#[test]
fn requests_without_the_token_are_refused() {
    let (mut api, registry, _) = api();
    for headers in [
        String::new(),
        "Authorization: Bearer 0123456789abcdef0123456789abcdeX\r\n".into(),
        format!("Authorization: Basic {TOKEN}\r\n"),
        format!("Authorization: Bearer {TOKEN}0\r\n"),
    ] {
        let body = format!(r#"{{"passkey":"{BOB}"}}"#);
        let (status, json) = call_with(&mut api, "PUT", "/v1/users/18", &headers, &body);
        assert_eq!(status, 401, "{headers:?}");
        assert!(json["error"].as_str().unwrap().contains("Bearer"));
    }
    assert_eq!(
        registry.user(key(BOB)),
        Err(shoal_private::Refusal::UnknownKey)
    );
    let head = b"PUT /v1/users/18 HTTP/1.1\r\n\r\n";
    let answer = String::from_utf8(api.respond(head, b"")).unwrap();
    assert!(answer.contains("WWW-Authenticate: Bearer"), "{answer}");
}

#[test]
fn users_are_put_read_and_deleted_idempotently() {
    let (mut api, registry, _) = api();
    let body = format!(r#"{{"passkey":"{BOB}","can_leech":false,"peer_cap":3}}"#);
    let (status, json) = call(&mut api, "PUT", "/v1/users/18", &body);
    assert_eq!((status, json["change"].as_str()), (201, Some("created")));
    let (status, json) = call(&mut api, "PUT", "/v1/users/18", &body);
    assert_eq!((status, json["change"].as_str()), (200, Some("unchanged")));
    let user = registry.user(key(BOB)).unwrap();
    assert_eq!((user.id, user.can_leech, user.peer_cap), (18, false, 3));
    let (status, json) = call(&mut api, "GET", "/v1/users/18", "");
    assert_eq!(status, 200);
    assert_eq!(json["peer_cap"], 3);
    assert_eq!(json["can_leech"], false);
    assert!(
        !json.to_string().contains(BOB),
        "the key is never told: {json}"
    );
    // Alice's key is taken.
    let (status, json) = call(
        &mut api,
        "PUT",
        "/v1/users/18",
        &format!(r#"{{"passkey":"{ALICE}"}}"#),
    );
    assert_eq!(status, 409);
    assert!(json["error"].as_str().unwrap().contains("user 17"));
    let (status, json) = call(&mut api, "DELETE", "/v1/users/18", "");
    assert_eq!((status, json["deleted"].as_bool()), (200, Some(true)));
    let (_, json) = call(&mut api, "DELETE", "/v1/users/18", "");
    assert_eq!(json["deleted"].as_bool(), Some(false));
    assert_eq!(call(&mut api, "GET", "/v1/users/18", "").0, 404);
    assert!(registry.user(key(BOB)).is_err());
}

#[test]
fn a_put_changes_only_the_fields_it_names() {
    let (mut api, registry, _) = api();
    let get = |api: &mut AdminApi| call(api, "GET", "/v1/users/17", "").1;
    assert_eq!(get(&mut api)["has_passkey"], true);
    // documents/admin-api.md's own example: the key stays.
    let (status, json) = call(&mut api, "PUT", "/v1/users/17", r#"{"can_leech":false}"#);
    assert_eq!((status, json["change"].as_str()), (200, Some("updated")));
    let alice = registry.user(key(ALICE)).unwrap();
    assert_eq!((alice.can_leech, alice.peer_cap), (false, 0));
    // Disabled and enabled again: told the account is disabled meanwhile, the key
    // and the other fields kept throughout.
    call(
        &mut api,
        "PUT",
        "/v1/users/17",
        r#"{"disabled":true,"peer_cap":4}"#,
    );
    assert_eq!(registry.user(key(ALICE)), Err(Refusal::Disabled));
    call(&mut api, "PUT", "/v1/users/17", r#"{"disabled":false}"#);
    let alice = registry.user(key(ALICE)).unwrap();
    assert_eq!((alice.can_leech, alice.peer_cap), (false, 4));
    let json = get(&mut api);
    assert_eq!(
        (&json["has_passkey"], &json["disabled"], &json["peer_cap"]),
        (&Value::Bool(true), &Value::Bool(false), &Value::from(4))
    );
    // Taking the key away takes an explicit null.
    let (status, _) = call(&mut api, "PUT", "/v1/users/17", r#"{"passkey":null}"#);
    assert_eq!(status, 200);
    assert_eq!(registry.user(key(ALICE)), Err(Refusal::UnknownKey));
    assert_eq!(get(&mut api)["has_passkey"], false);
    assert_eq!(registry.user_by_id(17).unwrap().peer_cap, 4);
    // A torrent's factors: the one not named keeps its value.
    let path = format!("/v1/torrents/{HASH}");
    call(&mut api, "PUT", &path, r#"{"up_factor":200}"#);
    call(&mut api, "PUT", &path, r#"{"id":2001,"down_factor":50}"#);
    let hash = shoal_common::parse_hex_hash(HASH).unwrap();
    assert_eq!(
        registry.torrent(&hash),
        Some(Torrent {
            id: 2001,
            up_factor: 200,
            down_factor: 50
        })
    );
}

#[test]
fn a_user_of_stateless_keys_is_registered_without_a_key() {
    let (mut api, registry, _) = api();
    let (status, json) = call(
        &mut api,
        "PUT",
        "/v1/users/42",
        r#"{"can_leech":false,"min_key_version":3}"#,
    );
    assert_eq!(
        (status, json["change"].as_str()),
        (201, Some("created")),
        "{json}"
    );
    let user = registry.user_by_id(42).unwrap();
    assert_eq!((user.can_leech, user.min_key_version), (false, 3));
    assert_eq!(
        call(&mut api, "GET", "/v1/users/42", "").1["min_key_version"],
        3
    );
}

#[test]
fn torrents_are_put_read_and_deleted() {
    let (mut api, registry, _) = api();
    let path = format!("/v1/torrents/{OTHER}");
    let (status, _) = call(&mut api, "PUT", &path, r#"{"id":7,"down_factor":0}"#);
    assert_eq!(status, 201);
    let (status, json) = call(&mut api, "GET", &path, "");
    assert_eq!(status, 200);
    assert_eq!(
        (
            json["id"].as_u64(),
            json["up_factor"].as_u64(),
            json["down_factor"].as_u64()
        ),
        (Some(7), Some(100), Some(0))
    );
    assert!(
        registry
            .announce(
                key(ALICE),
                &[
                    0x89, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x01,
                    0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef
                ],
                true
            )
            .is_ok()
    );
    assert_eq!(
        call(&mut api, "PUT", &path, r#"{"id":7,"up_factor":10001}"#).0,
        400
    );
    assert_eq!(call(&mut api, "DELETE", &path, "").1["deleted"], true);
    assert_eq!(call(&mut api, "GET", &path, "").0, 404);
    assert_eq!(registry.counts(), (1, 1));
}

#[test]
fn bad_requests_say_what_is_wrong_without_echoing_values() {
    let (mut api, _, _) = api();
    let cases = [
        ("PUT", "/v1/users/x", "{}", 400, "user id"),
        (
            "PUT",
            "/v1/users/018",
            "{}",
            400,
            "without sign or leading zeros",
        ),
        (
            "GET",
            "/v1/users/+17",
            "",
            400,
            "without sign or leading zeros",
        ),
        ("PUT", "/v1/users/18", "{", 400, "ends too soon"),
        ("PUT", "/v1/users/18", "not json", 400, "not JSON"),
        (
            "PUT",
            "/v1/users/18",
            r#"{"passkey":"short"}"#,
            400,
            "passkey: 16 to 128",
        ),
        (
            "PUT",
            "/v1/users/18",
            r#"{"passkey":"6f0d1b2c3d4e5f60718293a4b5c6d7e8","vip":true}"#,
            400,
            "unknown field `vip`",
        ),
        (
            "PUT",
            "/v1/torrents/89abcdef0123456789abcdef0123456789abcdef",
            r#"{"up_factor":100}"#,
            400,
            "a new torrent needs the site's id",
        ),
        (
            "PUT",
            "/v1/users/18",
            r#"{"passkey":17}"#,
            400,
            "wrong type",
        ),
        (
            "PUT",
            "/v1/users/18",
            r#"{"passkey":"x","peer_cap":70000}"#,
            400,
            "wrong type or out of range",
        ),
        ("PUT", "/v1/torrents/abc", "{}", 400, "info hash"),
        ("PATCH", "/v1/users/18", "{}", 405, "GET, PUT and DELETE"),
        ("GET", "/v2/users/18", "", 404, "no such resource"),
        ("DELETE", "/v1/status", "", 405, "not served"),
    ];
    for (method, path, body, status, says) in cases {
        let (got, json) = call(&mut api, method, path, body);
        let error = json["error"].as_str().unwrap_or_default().to_owned();
        assert_eq!(got, status, "{method} {path} {body}: {error}");
        assert!(error.contains(says), "{method} {path} {body}: {error}");
        assert!(!error.contains("6f0d1b2c"), "{error}");
    }
    // A passkey where a number belongs is not echoed either.
    let (_, json) = call(
        &mut api,
        "PUT",
        "/v1/torrents/0123456789abcdef0123456789abcdef01234567",
        &format!(r#"{{"id":"{ALICE}"}}"#),
    );
    assert!(!json.to_string().contains(ALICE), "{json}");
}

#[test]
fn access_list_entries_change_on_trackers_whose_list_is_on() {
    let (mut api, _, list) = api();
    let path = format!("/v1/access-list/{OTHER}");
    let (status, json) = call(&mut api, "PUT", &path, "");
    assert_eq!(status, 200, "{json}");
    assert_eq!(json["trackers"][0]["tracker"], "http");
    assert_eq!(json["trackers"][0]["added"], 1);
    assert_eq!(list.len(), 2);
    let (_, json) = call(&mut api, "GET", &path, "");
    assert_eq!(json["trackers"][0]["served"], true);
    let body = format!(r#"{{"remove":["{OTHER}","{HASH}"]}}"#);
    let (status, json) = call(&mut api, "POST", "/v1/access-list", &body);
    assert_eq!(status, 409, "an allow list is never emptied: {json}");
    assert_eq!(list.len(), 2);
    let body = format!(r#"{{"add":["{}"],"remove":["{OTHER}"]}}"#, "11".repeat(20));
    let (status, json) = call(&mut api, "POST", "/v1/access-list", &body);
    assert_eq!(
        (status, json["trackers"][0]["entries"].as_u64()),
        (200, Some(2)),
        "{json}"
    );
    let (status, json) = call(&mut api, "POST", "/v1/access-list", r#"{"add":["zz"]}"#);
    assert_eq!(status, 400);
    assert!(json["error"].as_str().unwrap().contains("add[0]"));
    let (_, json) = call(&mut api, "GET", "/v1/status", "");
    assert_eq!(json["trackers"][0]["private"]["users"], 1);
    assert_eq!(json["trackers"][1]["access_list"]["entries"], 2);
}

#[test]
fn without_private_trackers_or_lists_the_api_says_so() {
    let targets = vec![AdminTarget {
        protocol: "udp",
        access: Arc::new(AccessControl::with_list(
            AccessListMode::Off,
            AccessList::default(),
        )),
        clients: Arc::new(ClientRules::default()),
        registry: None,
        accounts: None,
        interval: None,
    }];
    let mut api = AdminApi::new(KeyDigest::of_secret(TOKEN.as_bytes()), targets);
    let (status, json) = call(&mut api, "GET", "/v1/users/17", "");
    assert_eq!(status, 409);
    assert!(
        json["error"]
            .as_str()
            .unwrap()
            .contains("private mode is off")
    );
    let (status, _) = call(&mut api, "PUT", &format!("/v1/access-list/{HASH}"), "");
    assert_eq!(status, 409);
}

#[test]
fn client_rules_are_replaced_whole_on_every_tracker() {
    let targets: Vec<AdminTarget> = ["udp", "http"]
        .into_iter()
        .map(|protocol| AdminTarget {
            protocol,
            access: Arc::new(AccessControl::with_list(
                AccessListMode::Off,
                AccessList::default(),
            )),
            clients: Arc::new(ClientRules::default()),
            registry: None,
            accounts: None,
            interval: None,
        })
        .collect();
    let rules: Vec<Arc<ClientRules>> = targets.iter().map(|t| t.clients.clone()).collect();
    let mut api = AdminApi::new(KeyDigest::of_secret(TOKEN.as_bytes()), targets);
    let body = r#"{"deny_peer_ids":["-XL"],"deny_user_agents":["Xunlei"]}"#;
    let (status, json) = call(&mut api, "PUT", "/v1/client-rules", body);
    assert_eq!(
        (status, json["change"].as_str()),
        (200, Some("updated")),
        "{json}"
    );
    let mut xunlei = [b'x'; 20];
    xunlei[..4].copy_from_slice(b"-XL0");
    for rules in &rules {
        assert!(rules.check(&xunlei, b"").is_err());
        assert!(rules.check(&[b'x'; 20], b"Xunlei 5").is_err());
        assert!(rules.check(&[b'x'; 20], b"qBittorrent").is_ok());
    }
    assert_eq!(
        call(&mut api, "PUT", "/v1/client-rules", body).1["change"],
        "unchanged"
    );
    let (_, json) = call(&mut api, "GET", "/v1/client-rules", "");
    assert_eq!(json["trackers"][1]["deny_peer_ids"][0], "-XL");
    let (status, json) = call(
        &mut api,
        "PUT",
        "/v1/client-rules",
        r#"{"deny_peer_ids":[""]}"#,
    );
    assert_eq!(status, 400);
    assert!(
        json["error"].as_str().unwrap().contains("deny_peer_ids"),
        "{json}"
    );
    assert!(
        rules[0].check(&xunlei, b"").is_err(),
        "a bad body changes nothing"
    );
    assert_eq!(
        call(&mut api, "PUT", "/v1/client-rules", "{}").1["change"],
        "updated"
    );
    assert!(rules[0].check(&xunlei, b"").is_ok());
}

#[test]
fn the_interval_s_bounds_are_changed_live_and_checked() {
    let (mut api, _, _) = api();
    let (status, body) = call(&mut api, "GET", "/v1/interval", "");
    assert_eq!(status, 200);
    // Only the UDP tracker of the rig has an interval.
    assert_eq!(body["trackers"].as_array().unwrap().len(), 1);
    assert_eq!(body["trackers"][0]["interval"]["ipv4"], 1800);
    assert_eq!(body["trackers"][0]["max"], 10_800);
    // A lower maximum and a fixed interval; what is left out stays.
    let (status, body) = call(
        &mut api,
        "PUT",
        "/v1/interval/udp",
        r#"{"max": 3600, "fixed": 2400}"#,
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["change"], "updated");
    assert_eq!(
        (&body["min"], &body["max"], &body["fixed"]),
        (&json!(1800), &json!(3600), &json!(2400))
    );
    assert_eq!(
        body["interval"]["ipv6"], 2400,
        "a fixed interval is given at once"
    );
    let (_, body) = call(&mut api, "PUT", "/v1/interval/udp", r#"{"max": 3600}"#);
    assert_eq!(
        (&body["change"], &body["fixed"]),
        (&json!("unchanged"), &json!(2400))
    );
    let (_, body) = call(&mut api, "PUT", "/v1/interval/udp", r#"{"fixed": null}"#);
    assert_eq!(
        (&body["change"], &body["fixed"]),
        (&json!("updated"), &Value::Null)
    );
    // Bounds that cannot hold, unknown keys, another tracker: refused, nothing changed.
    for (path, body, expected) in [
        ("/v1/interval/udp", r#"{"min": 7200}"#, 400),
        ("/v1/interval/udp", r#"{"max": 100000}"#, 400),
        ("/v1/interval/udp", r#"{"fixed": 0}"#, 400),
        ("/v1/interval/udp", r#"{"maximum": 3600}"#, 400),
        ("/v1/interval/http", r#"{"max": 3600}"#, 404),
        ("/v1/interval/ws", "{}", 404),
    ] {
        let (status, answer) = call(&mut api, "PUT", path, body);
        assert_eq!(status, expected, "{path} {body}: {answer}");
    }
    let (_, body) = call(&mut api, "GET", "/v1/interval/udp", "");
    assert_eq!((&body["min"], &body["max"]), (&json!(1800), &json!(3600)));
    assert_eq!(call(&mut api, "DELETE", "/v1/interval/udp", "").0, 405);
}
