//! Accounting batches added to a stream of a real redis-server, and kept while it is
//! down.

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use shoal_cluster::resp::Reply;
use shoal_cluster::{Connection, StoreAddress};
use shoal_common::testing::RedisServer;
use shoal_private::{Batch, write_batch};
use shoal_worker::{ExportTargets, Exporter, RedisTarget};

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
    let exporter = Exporter::start("udp", &dir, to_stream(&address), 100).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while exporter.stats.redis_failed.load(Relaxed) == 0 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
    exporter.finish();
    assert_eq!(files_in(&dir), 2, "kept while the store is down");

    // A store that is up: the next run's exporter sends both, in order.
    let redis = RedisServer::start();
    let exporter = Exporter::start("udp", &dir, to_stream(&redis.address()), 100).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while files_in(&dir) > 0 {
        assert!(Instant::now() < deadline, "not exported in time");
        std::thread::sleep(Duration::from_millis(20));
    }
    exporter.finish();
    assert_eq!(exporter.stats.redis_sent.load(Relaxed), 2);
    let mut store = Connection::open(&StoreAddress {
        address: redis.address(),
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
    assert_eq!(batches, ["udp-5-1-0", "udp-5-1-1"]);
    std::fs::remove_dir_all(&dir).unwrap();
}
