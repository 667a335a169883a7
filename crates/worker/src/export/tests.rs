use std::sync::mpsc;

use shoal_private::{Batch, Credit, write_batch};

use super::*;

/// A directory of its own under the temporary directory.
fn directory(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("shoal-export-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn batch(id: &str, user: u32) -> Batch {
    Batch {
        id: id.into(),
        from: 0,
        to: 10,
        entries: vec![(
            user,
            1001,
            Credit {
                uploaded: 4096,
                ..Credit::default()
            },
        )],
    }
}

/// A site's endpoint: answers each POST with the next of `statuses` (200 once they
/// run out) and hands each request's head and body to the receiver.
fn site(statuses: Vec<u16>) -> (String, mpsc::Receiver<(String, String)>) {
    let (address, received) = shoal_common::testing::post_endpoint(statuses);
    (format!("http://{address}/tracker/batches?site=1"), received)
}

fn wait_until(done: impl FnMut() -> bool) {
    assert!(shoal_common::testing::eventually(done), "not in time");
}

fn files_in(dir: &Path) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

#[test]
fn batches_reach_the_site_in_order_after_it_was_down_and_leave_the_directory() {
    let dir = directory("http");
    // Two from an earlier run of this tracker, one from this one, and another
    // tracker's, which is not this exporter's to send.
    for id in [
        "udp-1000-7-1",
        "udp-1000-7-0",
        "udp-2000-8-0",
        "http-1000-7-0",
    ] {
        write_batch(&dir, &batch(id, 17)).unwrap();
    }
    let (url, received) = site(vec![503]);
    let targets = ExportTargets {
        http: Some(HttpTarget::parse(&url).unwrap()),
        redis: None,
    };
    let exporter = Exporter::start("udp", &dir, targets).unwrap();
    let mut ids = Vec::new();
    while ids.len() < 4 {
        let (head, body) = received.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(
            head.starts_with("POST /tracker/batches?site=1 HTTP/1.1"),
            "{head}"
        );
        let id = head
            .lines()
            .find_map(|l| l.strip_prefix("Idempotency-Key: "))
            .unwrap()
            .to_owned();
        assert!(body.contains(&format!("\"batch\":\"{id}\"")), "{body}");
        ids.push(id);
    }
    // The first try was refused (503) and repeated; then the rest, oldest first.
    assert_eq!(
        ids,
        [
            "udp-1000-7-0",
            "udp-1000-7-0",
            "udp-1000-7-1",
            "udp-2000-8-0"
        ]
    );
    wait_until(|| files_in(&dir) == 1);
    assert!(dir.join("http-1000-7-0.json").exists());
    assert_eq!(exporter.stats.http_sent.load(Relaxed), 3);
    assert_eq!(exporter.stats.http_failed.load(Relaxed), 1);
    exporter.finish();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn urls_are_checked() {
    assert_eq!(
        HttpTarget::parse("http://site.internal/batches").unwrap(),
        HttpTarget {
            authority: "site.internal:80".into(),
            path: "/batches".into()
        }
    );
    assert_eq!(HttpTarget::parse("http://10.0.0.5:8080").unwrap().path, "/");
    for bad in [
        "https://site/",
        "site/",
        "http://user:pw@site/",
        "http:///x",
        "http://s/a b",
    ] {
        assert!(HttpTarget::parse(bad).is_err(), "{bad}");
    }
    let redis = RedisTarget::parse("redis://:secret@10.0.0.5:6379/2", "shoal:accounting").unwrap();
    assert_eq!(
        (
            redis.store.address.as_str(),
            redis.store.password.as_str(),
            redis.store.database
        ),
        ("10.0.0.5:6379", "secret", 2)
    );
    let redis = RedisTarget::parse("redis://shoal:pw@[::1]:6379", "s").unwrap();
    assert_eq!(
        (redis.store.username.as_str(), redis.store.address.as_str()),
        ("shoal", "[::1]:6379")
    );
    for bad in [
        "http://x:1",
        "redis://host",
        "redis://h:1/x",
        "redis://secret@h:1",
    ] {
        assert!(RedisTarget::parse(bad, "s").is_err(), "{bad}");
    }
    assert!(RedisTarget::parse("redis://h:1", "").is_err());
}

#[test]
fn a_target_back_after_failures_says_how_long_and_how_many_tries() {
    let mut lane = Lane::new(());
    let batches = vec![(
        "udp-1-1-0".to_owned(),
        PathBuf::from("/nonexistent/udp-1-1-0.json"),
    )];
    let start = Instant::now();
    // The file cannot be read: every pass fails.
    for pass in 1..=3u32 {
        let outcome = lane.run_and_note(&batches, start, |_, _, _| Ok(()));
        assert!(outcome.is_err(), "pass {pass}");
        assert_eq!(lane.failing.map(|(_, passes)| passes), Some(pass));
    }
    // Nothing waiting any more: the pass succeeds, and says it is back.
    let later = start + Duration::from_secs(42);
    assert_eq!(
        lane.run_and_note(&[], later, |_, _, _| Ok(())),
        Ok(Some((Duration::from_secs(42), 3)))
    );
    // Once: the next good pass says nothing.
    assert_eq!(lane.run_and_note(&[], later, |_, _, _| Ok(())), Ok(None));
}
