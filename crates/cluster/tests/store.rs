//! The store connection against a real redis-server: logging in with an ACL user,
//! refusals named, and a pipeline's replies in order.

use std::time::Duration;

use shoal_cluster::Reply;
use shoal_cluster::{Connection, StoreAddress};
use shoal_common::testing::RedisServer;

fn address(redis: &RedisServer, username: &str, password: &str) -> StoreAddress {
    StoreAddress {
        address: redis.address(),
        username: username.into(),
        password: password.into(),
        database: 0,
        timeout: Duration::from_secs(2),
    }
}

#[test]
fn an_acl_user_logs_in_and_a_wrong_password_is_refused_by_name() {
    let redis = RedisServer::start();
    let mut admin = Connection::open(&address(&redis, "", "")).unwrap();
    let reply = admin
        .command(&[
            b"ACL",
            b"SETUSER",
            b"shoal",
            b"on",
            b">secret",
            b"~shoal:*",
            b"+xadd",
            b"+xread",
            b"+pexpire",
            b"+select",
        ])
        .unwrap();
    assert_eq!(reply, Reply::Status("OK".into()));

    let mut node = Connection::open(&address(&redis, "shoal", "secret")).unwrap();
    let id = node
        .command(&[b"XADD", b"shoal:udp:changes", b"*", b"c", b"x"])
        .unwrap()
        .into_bulk()
        .unwrap();
    assert!(id.contains(&b'-'), "a stream id: {id:?}");
    // Outside its keys, the store says no.
    assert!(matches!(
        node.command(&[b"XADD", b"other", b"*", b"c", b"x"]).unwrap(),
        Reply::Error(message) if message.starts_with("NOPERM")
    ));

    let error = Connection::open(&address(&redis, "shoal", "wrong")).unwrap_err();
    assert!(
        format!("{error:#}").contains("refused the login"),
        "{error:#}"
    );
}

#[test]
fn a_pipeline_returns_every_reply_in_order_and_a_closed_port_fails_fast() {
    let redis = RedisServer::start();
    let mut store = Connection::open(&address(&redis, "", "")).unwrap();
    let mut commands = Vec::new();
    for value in [&b"1"[..], b"2", b"3"] {
        shoal_cluster::encode_command(&[b"RPUSH", b"list", value], &mut commands);
    }
    let replies = store.pipeline(&commands, 3).unwrap();
    assert_eq!(
        replies,
        vec![Reply::Integer(1), Reply::Integer(2), Reply::Integer(3)]
    );
    let address = address(&redis, "", "");
    drop(redis);
    let started = std::time::Instant::now();
    assert!(Connection::open(&address).is_err());
    assert!(started.elapsed() < Duration::from_secs(3));
}
