//! Accounting batches added to a stream of a real redis-server, and kept while it is
//! down.

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use shoal_cluster::Reply;
use shoal_cluster::{Connection, StoreAddress};
use shoal_common::testing::RedisServer;
use shoal_private::{Batch, write_batch};
use shoal_worker::{ExportTargets, Exporter, HttpTarget, RedisTarget};

fn batch(id: &str) -> Batch {
    Batch {
        id: id.into(),
        from: 0,
        to: 10,
        entries: Vec::new(),
    }
}

fn files_in(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

fn to_stream(address: &str) -> ExportTargets {
    let url = format!("redis://{address}");
    ExportTargets {
        http: None,
        redis: Some(RedisTarget::parse(&url, "shoal:accounting").unwrap()),
    }
}

/// The batch ids in the stream `shoal:accounting` of the store at `address`, in order.
fn stream_ids(address: &str) -> Vec<String> {
    let mut store = Connection::open(&StoreAddress {
        address: address.to_owned(),
        username: String::new(),
        password: String::new(),
        database: 0,
        timeout: Duration::from_secs(2),
    })
    .unwrap();
    let entries = store
        .command(&[b"XRANGE", b"shoal:accounting", b"-", b"+"])
        .unwrap()
        .into_array()
        .unwrap();
    let batches: Vec<String> = entries
        .into_iter()
        .map(|entry| {
            let fields = entry.into_array().unwrap().remove(1).into_array().unwrap();
            let [
                Reply::Bulk(name),
                Reply::Bulk(id),
                Reply::Bulk(_),
                Reply::Bulk(json),
            ] = &fields[..]
            else {
                panic!("{fields:?}")
            };
            assert_eq!(name, b"batch");
            let id = String::from_utf8(id.clone()).unwrap();
            assert!(String::from_utf8_lossy(json).contains(&format!("\"batch\":\"{id}\"")));
            id
        })
        .collect();
    batches
}

#[test]
fn batches_go_to_the_stream_once_the_store_is_up() {
    let dir = std::env::temp_dir().join(format!("shoal-export-redis-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // The store is down at first: the batches wait.
    let mut gone = RedisServer::start();
    let address = gone.address();
    gone.stop();
    write_batch(&dir, &batch("udp-5-1-0")).unwrap();
    write_batch(&dir, &batch("udp-5-1-1")).unwrap();
    let exporter = Exporter::start("udp", &dir, to_stream(&address)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while exporter.stats.redis_failed.load(Relaxed) == 0 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
    exporter.finish();
    assert_eq!(files_in(&dir), 2, "kept while the store is down");

    // A store that is up: the next run's exporter sends both, in order.
    let redis = RedisServer::start();
    let exporter = Exporter::start("udp", &dir, to_stream(&redis.address())).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while files_in(&dir) > 0 {
        assert!(Instant::now() < deadline, "not exported in time");
        std::thread::sleep(Duration::from_millis(20));
    }
    exporter.finish();
    assert_eq!(exporter.stats.redis_sent.load(Relaxed), 2);
    let batches = stream_ids(&redis.address());
    assert_eq!(batches, ["udp-5-1-0", "udp-5-1-1"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The site's HTTP endpoint down does not hold back the stream: the stream takes every
/// batch at once, in order; the endpoint, once it answers, takes them too, in order;
/// only then do the files leave the directory.
#[test]
fn a_target_that_is_down_delays_no_other() {
    let dir = std::env::temp_dir().join(format!("shoal-export-both-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for n in 0..3 {
        write_batch(&dir, &batch(&format!("http-7-1-{n}"))).unwrap();
    }
    let redis = RedisServer::start();
    // The endpoint's port, nothing listening yet.
    let site = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let site_address = site.local_addr().unwrap();
    drop(site);
    let targets = ExportTargets {
        http: Some(HttpTarget::parse(&format!("http://{site_address}/batches")).unwrap()),
        redis: to_stream(&redis.address()).redis,
    };
    let exporter = Exporter::start("http", &dir, targets).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while stream_ids(&redis.address()).len() < 3 {
        assert!(
            Instant::now() < deadline,
            "the stream waited for the endpoint"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        stream_ids(&redis.address()),
        ["http-7-1-0", "http-7-1-1", "http-7-1-2"]
    );
    assert!(exporter.stats.http_failed.load(Relaxed) >= 1);
    assert_eq!(files_in(&dir), 3, "kept for the endpoint");
    // A batch written meanwhile goes to the stream while the endpoint is still down.
    write_batch(&dir, &batch("http-7-1-3")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while stream_ids(&redis.address()).len() < 4 {
        assert!(
            Instant::now() < deadline,
            "the stream waited for the endpoint"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The endpoint comes up: it gets all four, in order, and the files go.
    let listener = std::net::TcpListener::bind(site_address).unwrap();
    let (_, posted) = shoal_common::testing::post_endpoint_on(listener, Vec::new());
    let ids: Vec<String> = (0..4)
        .map(|_| {
            let (head, _) = posted.recv_timeout(Duration::from_secs(70)).unwrap();
            head.lines()
                .find_map(|line| line.strip_prefix("Idempotency-Key: "))
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(
        ids,
        ["http-7-1-0", "http-7-1-1", "http-7-1-2", "http-7-1-3"]
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while files_in(&dir) > 0 {
        assert!(
            Instant::now() < deadline,
            "files kept after every target took them"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    exporter.finish();
    assert_eq!(
        stream_ids(&redis.address()).len(),
        4,
        "each batch once in the stream"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
