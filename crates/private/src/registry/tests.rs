use super::files::hex_hash;
use super::*;

const ALICE: &str = "6f0d1b2c3d4e5f60718293a4b5c6d7e8";
const BOB: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f90";
const CAROL: &str = "ccccccccccccccccccccccccccccccc1";
const HASH: &str = "0123456789abcdef0123456789abcdef01234567";
const V2: &str = "89abcdef0123456789abcdef0123456789abcdef";
/// The process's secret for stateless keys (one per process: every test sets this one).
const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef: a test secret";

fn registry() -> Registry {
    Registry::parse(
        &format!(
            "# users\n17 {ALICE}\n18 {BOB} noleech peers=3  # seeding only\n\n19 {CAROL} disabled\n"
        ),
        &format!("{HASH} 1001 down=0\n{V2} 1001 down=0\n"),
    )
    .unwrap()
}

fn key(text: &str) -> Option<KeyDigest> {
    Passkey::new(text.as_bytes()).map(Passkey::digest)
}

fn hash(hex: &str) -> [u8; 20] {
    hex_hash(hex).unwrap()
}

#[test]
fn announces_are_granted_or_refused_for_a_reason() {
    let registry = registry();
    let grant = registry.announce(key(ALICE), &hash(HASH), true).unwrap();
    assert_eq!(
        (grant.user.id, grant.torrent.id, grant.torrent.down_factor),
        (17, 1001, 0)
    );
    // The v2 hash of the same hybrid torrent is the same torrent.
    assert_eq!(
        registry
            .announce(key(ALICE), &hash(V2), true)
            .unwrap()
            .torrent
            .id,
        1001
    );
    assert_eq!(
        registry.announce(None, &hash(HASH), true),
        Err(Refusal::MissingKey)
    );
    assert_eq!(
        registry.announce(key("00000000000000000000000000000bad"), &hash(HASH), true),
        Err(Refusal::UnknownKey)
    );
    // Too short to be a key: as if none was given.
    assert_eq!(
        registry.announce(key("0000"), &hash(HASH), true),
        Err(Refusal::MissingKey)
    );
    assert_eq!(
        registry.announce(key(CAROL), &hash(HASH), false),
        Err(Refusal::Disabled)
    );
    assert_eq!(
        registry.announce(key(ALICE), &[7; 20], false),
        Err(Refusal::Unregistered)
    );
    assert_eq!(
        registry.announce(key(BOB), &hash(HASH), true),
        Err(Refusal::CannotLeech)
    );
    let seeding = registry.announce(key(BOB), &hash(HASH), false).unwrap();
    assert_eq!(seeding.user.peer_cap, 3);
    for refusal in [
        Refusal::MissingKey,
        Refusal::UnknownKey,
        Refusal::Unregistered,
    ] {
        assert!(!refusal.reason().contains(ALICE));
    }
}

#[test]
fn scrapes_need_a_user_and_registered_torrents() {
    let registry = registry();
    assert_eq!(registry.scrape(key(ALICE), [&hash(HASH)]).unwrap().id, 17);
    assert_eq!(registry.scrape(key(ALICE), []).unwrap().id, 17);
    assert_eq!(
        registry.scrape(key(ALICE), [&hash(HASH), &[7; 20]]),
        Err(Refusal::Unregistered)
    );
    assert_eq!(
        registry.scrape(None, [&hash(HASH)]),
        Err(Refusal::MissingKey)
    );
}

#[test]
fn bad_lines_are_refused_with_their_number() {
    let users = |text: &str| format!("{:#}", Registry::parse(text, "").unwrap_err());
    assert!(
        users("17\n").contains("line 1: expected"),
        "{}",
        users("17\n")
    );
    assert!(users(&format!("x {ALICE}\n")).contains("the first word is not a user id"));
    // One spelling per id: `+18` and `018` are not user 18.
    for alias in ["+18", "018", "4294967296"] {
        let text = users(&format!("{alias} {ALICE}\n"));
        assert!(text.contains("not a user id"), "{alias}: {text}");
    }

    assert!(users("17 a/b\n").contains("line 1: user 17's passkey must be"));
    assert!(users(&format!("17 {ALICE} vip\n")).contains("word 3 is not an option"));
    // Columns swapped, or a key where an option belongs: the key is not echoed.
    assert!(!users(&format!("{ALICE} 17\n")).contains(ALICE));
    assert!(!users(&format!("17 {ALICE} {BOB}\n")).contains(BOB));
    assert!(users(&format!("17 {ALICE}\n17 {BOB}\n")).contains("line 2: user 17 is listed twice"));
    assert!(users(&format!("17 {ALICE}\n18 {ALICE}\n")).contains("another user's too"));
    let torrents = |text: &str| format!("{:#}", Registry::parse("", text).unwrap_err());
    assert!(torrents("abc 1\n").contains("line 1:"));
    assert!(torrents(&format!("{HASH} 1 down=x\n")).contains("a percentage"));
    assert!(torrents(&format!("{HASH} 1\n{HASH} 2\n")).contains("line 2: info hash listed twice"));
    assert!(torrents(&format!("{HASH} 01\n")).contains("not a number"));
    // No key text in any message.
    assert!(!users(&format!("17 {ALICE}\n18 {ALICE}\n")).contains(ALICE));
}

#[test]
fn a_failed_reload_keeps_the_old_registry() {
    let dir = std::env::temp_dir().join(format!("shoal-private-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (users, torrents) = (dir.join("users"), dir.join("torrents"));
    std::fs::write(&users, format!("17 {ALICE}\n")).unwrap();
    std::fs::write(&torrents, format!("{HASH} 1\n")).unwrap();
    let shared = Registry::load(&users, &torrents).unwrap();
    assert_eq!(shared.counts(), (1, 1));
    std::fs::write(&users, format!("17 {ALICE}\n18 {BOB}\n")).unwrap();
    assert_eq!(
        shared.reload_and_log("udp"),
        "udp registry: 2 users, 1 torrents"
    );
    std::fs::write(&users, "bad line\n").unwrap();
    assert_eq!(
        shared.reload_and_log("udp"),
        "udp registry kept (2 users, 1 torrents): reload failed"
    );
    assert_eq!(shared.counts(), (2, 1));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn users_and_torrents_change_one_at_a_time() {
    let registry = registry();
    let alice = registry.user_by_id(17).unwrap();
    let passkey = |text: &'static str| KeyChange::Set(Passkey::new(text.as_bytes()).unwrap());
    assert_eq!(
        registry.put_user(alice, passkey(ALICE)),
        Ok(Change::Unchanged)
    );
    // A new key for Alice: the old one stops working.
    const NEW: &str = "n3wn3wn3wn3wn3wn3wn3wn3wn3wn3wn3";
    assert_eq!(registry.put_user(alice, passkey(NEW)), Ok(Change::Updated));
    assert_eq!(registry.user(key(ALICE)), Err(Refusal::UnknownKey));
    assert_eq!(registry.user(key(NEW)).unwrap().id, 17);
    // Bob's key cannot become Alice's.
    assert_eq!(
        registry.put_user(alice, passkey(BOB)),
        Err(Conflict::KeyTaken(18))
    );
    let dave = User {
        id: 20,
        can_leech: false,
        disabled: false,
        peer_cap: 2,
        min_key_version: 0,
    };
    assert_eq!(registry.put_user(dave, passkey(ALICE)), Ok(Change::Created));
    assert_eq!(registry.user(key(ALICE)), Ok(dave));
    assert_eq!(
        registry.put_user(
            User {
                peer_cap: 5,
                ..dave
            },
            passkey(ALICE)
        ),
        Ok(Change::Updated)
    );
    assert_eq!(registry.user_by_id(20).unwrap().peer_cap, 5);
    assert!(registry.delete_user(20));
    assert!(!registry.delete_user(20));
    assert_eq!(registry.user(key(ALICE)), Err(Refusal::UnknownKey));
    assert_eq!(registry.counts(), (3, 2));

    let torrent = Torrent {
        id: 7,
        up_factor: 200,
        down_factor: 0,
    };
    assert_eq!(registry.put_torrent([7; 20], torrent), Change::Created);
    assert_eq!(registry.put_torrent([7; 20], torrent), Change::Unchanged);
    assert_eq!(
        registry.announce(key(NEW), &[7; 20], true).unwrap().torrent,
        torrent
    );
    assert!(registry.delete_torrent(&[7; 20]));
    assert!(!registry.delete_torrent(&[7; 20]));
    assert_eq!(
        registry.announce(key(NEW), &[7; 20], true),
        Err(Refusal::Unregistered)
    );
}

#[test]
fn a_reload_reads_files_only_when_they_changed_and_trackers_share_one_registry() {
    let dir = std::env::temp_dir().join(format!("shoal-private-open-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (users, torrents) = (dir.join("users"), dir.join("torrents"));
    std::fs::write(&users, format!("17 {ALICE}\n")).unwrap();
    std::fs::write(&torrents, format!("{HASH} 1\n")).unwrap();
    let udp = Registry::open(&users, &torrents).unwrap();
    let http = Registry::open(&dir.join(".").join("users"), &torrents).unwrap();
    assert!(Arc::ptr_eq(&udp, &http), "one registry for the same files");
    let bob = User {
        id: 18,
        can_leech: true,
        disabled: false,
        peer_cap: 0,
        min_key_version: 0,
    };
    udp.put_user(bob, KeyChange::Set(Passkey::new(BOB.as_bytes()).unwrap()))
        .unwrap();
    assert_eq!(http.user(key(BOB)).unwrap().id, 18);
    // Files unchanged: the change made through the API stays.
    assert_eq!(
        udp.reload_and_log("udp"),
        "udp registry: 2 users, 1 torrents (files unchanged)"
    );
    // The site wrote its files again: they are the registry now.
    std::fs::write(&users, format!("17 {ALICE}\n19 {CAROL}\n")).unwrap();
    assert_eq!(
        udp.reload_and_log("udp"),
        "udp registry: 2 users, 1 torrents"
    );
    assert_eq!(http.user(key(BOB)), Err(Refusal::UnknownKey));
    assert_eq!(http.user_by_id(19).unwrap().id, 19);
    assert!(http.delete_user(19));
    drop((udp, http));
    // Nothing holds it: opened again, it is read again.
    let again = Registry::open(&users, &torrents).unwrap();
    assert_eq!(again.counts(), (2, 1));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn stateless_keys_need_no_registration_and_old_versions_can_be_retired() {
    crate::set_secret(SECRET).unwrap();
    assert!(crate::set_secret(SECRET).is_ok(), "the same secret again");
    assert!(crate::set_secret(b"another secret, at least 32 bytes long").is_err());
    assert!(crate::set_secret(b"short").is_err());
    let registry = Registry::parse(&format!("17 {ALICE}\n18 - noleech version=2\n"), "").unwrap();
    let digest = |text: &str| Passkey::new(text.as_bytes()).map(Passkey::digest);
    let key42 = crate::derive_key(SECRET, 42, 1);
    assert_eq!(registry.user(digest(&key42)), Ok(User::unrestricted(42)));
    // A MAC with one digit changed, or another user's id on it: no user.
    let mut forged = key42.clone().into_bytes();
    let last = forged.len() - 1;
    forged[last] = if forged[last] == b'0' { b'1' } else { b'0' };
    let forged = String::from_utf8(forged).unwrap();
    assert_eq!(registry.user(digest(&forged)), Err(Refusal::UnknownKey));
    let moved = key42.replacen("42-", "43-", 1);
    assert_eq!(registry.user(digest(&moved)), Err(Refusal::UnknownKey));
    // Other spellings of the same key: a leading zero in the id or the version, an
    // upper-case MAC, a sign.
    for alias in [
        key42.replacen("42-", "042-", 1),
        key42.replacen("-1-", "-01-", 1),
        key42.replacen("42-", "+42-", 1),
        key42.to_uppercase(),
    ] {
        assert!(registry.user(digest(&alias)).is_err(), "{alias}");
    }
    // User 18 is registered to restrict them: seeding only, version 1 retired.
    let old = crate::derive_key(SECRET, 18, 1);
    assert_eq!(registry.user(digest(&old)), Err(Refusal::UnknownKey));
    let bob = registry
        .user(digest(&crate::derive_key(SECRET, 18, 2)))
        .unwrap();
    assert!(!bob.can_leech);
    // Registered through the API without a key: disabled.
    let disabled = User {
        disabled: true,
        ..User::unrestricted(42)
    };
    assert_eq!(
        registry.put_user(disabled, KeyChange::Keep),
        Ok(Change::Created)
    );
    assert_eq!(registry.user(digest(&key42)), Err(Refusal::Disabled));
    assert_eq!(registry.user_by_id(42), Some(disabled));
    // Keys from the users file work as before.
    assert_eq!(registry.user(key(ALICE)).unwrap().id, 17);
}

/// What each key form of user `id` is told: the key from the file (if any) and the
/// stateless keys of versions 0 to 2.
fn answers(registry: &Registry, id: u32, passkey: Option<&str>) -> Vec<Result<User, Refusal>> {
    let digest = |text: &str| Passkey::new(text.as_bytes()).map(Passkey::digest);
    passkey
        .map(|text| registry.user(digest(text)))
        .into_iter()
        .chain((0..3).map(|version| registry.user(digest(&crate::derive_key(SECRET, id, version)))))
        .collect()
}

#[test]
fn every_key_of_a_user_is_held_to_the_same_restrictions() {
    crate::set_secret(SECRET).unwrap();
    let registry = Registry::parse(
        &format!("17 - version=2 noleech\n18 {BOB} disabled\n19 {CAROL} peers=2\n"),
        "",
    )
    .unwrap();
    // A disabled user's stateless keys are refused as their passkey is.
    assert_eq!(
        answers(&registry, 18, Some(BOB)),
        vec![Err(Refusal::Disabled); 4]
    );
    // A capped user's stateless keys carry the cap.
    assert!(
        answers(&registry, 19, Some(CAROL))
            .iter()
            .all(|answer| answer.is_ok_and(|user| user.peer_cap == 2))
    );
    // User 17 gets a passkey and is disabled: retired versions stay retired, every
    // other key is disabled.
    let seventeen = User {
        disabled: true,
        ..registry.user_by_id(17).unwrap()
    };
    const NEW: &str = "n3wn3wn3wn3wn3wn3wn3wn3wn3wn3wn3";
    let set = KeyChange::Set(Passkey::new(NEW.as_bytes()).unwrap());
    assert_eq!(registry.put_user(seventeen, set), Ok(Change::Updated));
    assert!(registry.has_passkey(17));
    assert_eq!(
        answers(&registry, 17, Some(NEW)),
        vec![
            Err(Refusal::Disabled),
            Err(Refusal::UnknownKey),
            Err(Refusal::UnknownKey),
            Err(Refusal::Disabled)
        ]
    );
    // Enabled again, the key kept: seeding only, whichever key.
    let enabled = User {
        disabled: false,
        ..seventeen
    };
    assert_eq!(
        registry.put_user(enabled, KeyChange::Keep),
        Ok(Change::Updated)
    );
    let answers_now = answers(&registry, 17, Some(NEW));
    assert!(answers_now[0].is_ok_and(|user| !user.can_leech));
    assert!(answers_now[3].is_ok_and(|user| !user.can_leech));
    // Deleted: no key of theirs is served, stateless ones included, until they are
    // registered again.
    assert!(registry.delete_user(17));
    assert_eq!(registry.user_by_id(17), None);
    assert!(!registry.has_passkey(17));
    assert!(
        answers(&registry, 17, Some(NEW))
            .iter()
            .all(|answer| *answer == Err(Refusal::UnknownKey))
    );
    assert_eq!(registry.counts(), (2, 0));
    assert_eq!(
        registry.put_user(User::unrestricted(17), KeyChange::Keep),
        Ok(Change::Created)
    );
    assert!(answers(&registry, 17, None).iter().all(Result::is_ok));
    // The key taken away: only stateless keys are left.
    let key18 = Passkey::new(BOB.as_bytes()).unwrap();
    let eighteen = User {
        disabled: false,
        ..registry.user_by_id(18).unwrap()
    };
    assert_eq!(
        registry.put_user(eighteen, KeyChange::Set(key18)),
        Ok(Change::Updated)
    );
    assert_eq!(
        registry.put_user(eighteen, KeyChange::Remove),
        Ok(Change::Updated)
    );
    assert_eq!(
        registry.user(Some(key18.digest())),
        Err(Refusal::UnknownKey)
    );
    assert!(answers(&registry, 18, None).iter().all(Result::is_ok));
    // An id never registered: stateless keys are unrestricted.
    assert_eq!(
        answers(&registry, 99, None),
        vec![Ok(User::unrestricted(99)); 3]
    );
}

#[test]
fn a_reload_of_the_files_makes_them_the_whole_truth_again() {
    crate::set_secret(SECRET).unwrap();
    let dir = std::env::temp_dir().join(format!("shoal-private-tomb-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (users, torrents) = (dir.join("users"), dir.join("torrents"));
    std::fs::write(&users, "17 - noleech\n").unwrap();
    std::fs::write(&torrents, "").unwrap();
    let registry = Registry::load(&users, &torrents).unwrap();
    assert!(registry.delete_user(17));
    assert_eq!(answers(&registry, 17, None)[0], Err(Refusal::UnknownKey));
    // The site writes its files again, without 17: 17 is a user never registered.
    std::fs::write(&users, "18 - \n").unwrap();
    registry.reload_and_log("udp");
    assert_eq!(answers(&registry, 17, None)[0], Ok(User::unrestricted(17)));
    assert_eq!(registry.counts(), (1, 0));
    std::fs::remove_dir_all(&dir).unwrap();
}
