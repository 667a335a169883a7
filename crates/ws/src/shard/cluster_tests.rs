//! Two shards standing for two nodes of a cluster, the store replaced by handing each
//! the other's change log and relay log: membership, offers and answers across nodes,
//! and the ownership rules between them.

use rand::SeedableRng as _;
use serde_json::value::RawValue;
use shoal_ws_protocol::Offer;

use super::tests::{counts, send};
use super::*;

const HASH: Id20 = Id20([7; 20]);
/// The nodes' origins, as each one's reader would tag the other's entries.
const A: u64 = 0xa0a0;
const B: u64 = 0xb0b0;

fn node() -> WsShard {
    WsShard::new(
        fixed_settings(3, true),
        Capacity::UNLIMITED,
        SmallRng::seed_from_u64(3),
    )
}

fn conn(id: u64) -> ConnectionRef {
    ConnectionRef { worker: 0, id }
}

fn announce(peer_id: u8, left: u64, offers: usize) -> RequestKind {
    RequestKind::Announce(Box::new(AnnounceRequest {
        info_hash: HASH,
        peer_id: Id20([peer_id; 20]),
        event: AnnounceEvent::Started,
        left: Some(left),
        uploaded: None,
        downloaded: None,
        numwant: None,
        offers: (0..offers)
            .map(|n| Offer {
                offer_id: Id20([100 + n as u8; 20]),
                offer: RawValue::from_string(format!(r#"{{"type":"offer","sdp":"{n}"}}"#)).unwrap(),
            })
            .collect(),
        answer: None,
    }))
}

fn answer(from: u8, to: u8, offer_id: Id20) -> RequestKind {
    RequestKind::Announce(Box::new(AnnounceRequest {
        info_hash: HASH,
        peer_id: Id20([from; 20]),
        event: AnnounceEvent::Update,
        left: Some(1),
        uploaded: None,
        downloaded: None,
        numwant: None,
        offers: Vec::new(),
        answer: Some(WebRtcAnswer {
            to_peer_id: Id20([to; 20]),
            offer_id,
            answer: RawValue::from_string(r#"{"type":"answer","sdp":"a"}"#.into()).unwrap(),
        }),
    }))
}

/// Applies `from`'s recorded changes to `to`, as `to`'s reader would hand them over.
fn replicate(from: &mut WsShard, origin: u64, to: &mut WsShard, now: u32) -> Replicated {
    let bytes = from.change_log().unwrap().take();
    to.apply_changes(&bytes, 0, origin, ServerTime(now), &mut |_| true)
        .unwrap()
}

/// Hands `from`'s relayed messages to `to` (all for node `to_id`), and returns what
/// `to` delivered to its connections and what applying counted.
fn relay(
    from: &mut WsShard,
    origin: u64,
    to: &mut WsShard,
    to_id: u64,
    now: u32,
) -> (Vec<(ConnectionRef, ToConnection)>, Delivered) {
    let mut done = Delivered::default();
    for batch in from.relay_log().unwrap().take() {
        assert_eq!(batch.node, to_id, "relayed to the node that holds the peer");
        let got = to
            .apply_relayed(&batch.bytes, origin, ServerTime(now), &mut |_| true)
            .unwrap();
        done.delivered += got.delivered;
        done.undeliverable += got.undeliverable;
    }
    let mut delivered = Vec::new();
    to.flush_replies(&mut |worker, deliveries| {
        for (id, message) in deliveries {
            delivered.push((
                ConnectionRef {
                    worker: worker as u16,
                    id,
                },
                message,
            ));
        }
    });
    (delivered, done)
}

#[test]
fn an_offer_reaches_a_peer_of_the_other_node_and_its_answer_comes_back() {
    let (mut a, mut b) = (node(), node());
    // A seeder on node A, known to node B through the shared stream.
    let seeder = send(&mut a, conn(1), announce(1, 0, 0), 0);
    assert_eq!(counts(&seeder), (1, 0));
    let applied = replicate(&mut a, A, &mut b, 0);
    assert_eq!(applied.peers_added, 1);

    // A leecher on node B is counted with it, and its offer goes to node A.
    let leecher = send(&mut b, conn(9), announce(2, 5, 1), 1);
    assert_eq!(counts(&leecher), (1, 1), "one swarm over both nodes");
    assert!(
        !leecher
            .iter()
            .any(|(_, message)| matches!(message, ToConnection::Message(ServerMessage::Offer(_)))),
        "no offer is delivered on node B"
    );
    let (delivered, done) = relay(&mut b, B, &mut a, A, 1);
    assert_eq!(done.delivered, 1);
    let [(to, ToConnection::Message(ServerMessage::Offer(offer)))] = &delivered[..] else {
        panic!("one offer for the seeder's connection: {delivered:?}");
    };
    assert_eq!(
        (*to, offer.peer_id, offer.offer_id),
        (conn(1), Id20([2; 20]), Id20([100; 20]))
    );

    // Node A learnt the leecher from the offer itself (the stream comes later).
    assert_eq!(a.torrents.scrape(&HASH.0).leechers, 1);

    // The seeder answers on node A; the answer is checked there and relayed to B.
    let answered = send(&mut a, conn(1), answer(1, 2, Id20([100; 20])), 2);
    assert!(
        answered.is_empty(),
        "nothing for node A's connections: {answered:?}"
    );
    let (delivered, done) = relay(&mut a, A, &mut b, B, 2);
    assert_eq!(done.delivered, 1);
    let [(to, ToConnection::Message(ServerMessage::Answer(answer_message)))] = &delivered[..]
    else {
        panic!("one answer for the leecher's connection: {delivered:?}");
    };
    assert_eq!((*to, answer_message.peer_id), (conn(9), Id20([1; 20])));

    // Used up: a second answer to the same offer is refused on node A.
    let again = send(&mut a, conn(1), answer(1, 2, Id20([100; 20])), 3);
    assert!(matches!(again[..], [(_, ToConnection::AnswerRefused(_))]));
    assert!(a.relay_log().unwrap().is_empty());
}

#[test]
fn a_peer_id_belongs_to_one_connection_of_one_node() {
    let (mut a, mut b) = (node(), node());
    send(&mut a, conn(1), announce(1, 5, 0), 0);
    replicate(&mut a, A, &mut b, 0);
    // Node B refuses the same peer id on its own connection while node A's lives…
    let taken = send(&mut b, conn(1), announce(1, 5, 0), 1);
    assert!(
        matches!(taken[..], [(_, ToConnection::PeerIdTaken(_))]),
        "{taken:?}"
    );
    // …a change from another node does not take it over…
    let mut c = node();
    send(&mut c, conn(4), announce(1, 0, 0), 1);
    let applied = replicate(&mut c, 0xc0c0, &mut b, 1);
    assert_eq!(applied.peers_refreshed + applied.peers_added, 0);
    // …nor does any node's change touch a node's own peer.
    send(&mut b, conn(5), announce(3, 5, 0), 1);
    let mut d = node();
    send(&mut d, conn(5), announce(3, 0, 0), 1);
    replicate(&mut d, 0xd0d0, &mut b, 1);
    assert_eq!(
        b.torrents.peer(&HASH.0, &Id20([3; 20])).unwrap().extra.node,
        0
    );

    // Node A's peer stops: gone on node B too, and the id is free there.
    let mut stop = announce(1, 5, 0);
    if let RequestKind::Announce(request) = &mut stop {
        request.event = AnnounceEvent::Stopped;
    }
    send(&mut a, conn(1), stop, 2);
    assert_eq!(replicate(&mut a, A, &mut b, 2).peers_removed, 1);
    let mine = send(&mut b, conn(1), announce(1, 5, 0), 3);
    assert_eq!(counts(&mine), (0, 2));
}

#[test]
fn a_closed_connection_leaves_every_node_and_late_messages_for_it_are_dropped() {
    let (mut a, mut b) = (node(), node());
    send(&mut a, conn(1), announce(1, 0, 0), 0);
    replicate(&mut a, A, &mut b, 0);
    send(&mut b, conn(9), announce(2, 5, 1), 1);
    // The seeder's connection closes before the offer arrives.
    send(
        &mut a,
        conn(1),
        RequestKind::Leave(vec![(HASH, Id20([1; 20]))]),
        1,
    );
    let (delivered, done) = relay(&mut b, B, &mut a, A, 1);
    assert!(delivered.is_empty());
    assert_eq!((done.delivered, done.undeliverable), (0, 1));
    assert_eq!(replicate(&mut a, A, &mut b, 2).peers_removed, 1);
    assert_eq!(b.torrents.scrape(&HASH.0).seeders, 0);

    // An answer relayed for an offerer whose connection went (and whose peer id a new
    // connection took) is not handed to the newcomer.
    let (mut a, mut b) = (node(), node());
    send(&mut a, conn(1), announce(1, 0, 0), 0);
    replicate(&mut a, A, &mut b, 0);
    send(&mut b, conn(9), announce(2, 5, 1), 1);
    relay(&mut b, B, &mut a, A, 1);
    send(
        &mut b,
        conn(9),
        RequestKind::Leave(vec![(HASH, Id20([2; 20]))]),
        1,
    );
    send(&mut b, conn(10), announce(2, 5, 0), 1);
    send(&mut a, conn(1), answer(1, 2, Id20([100; 20])), 2);
    let (delivered, done) = relay(&mut a, A, &mut b, B, 2);
    assert!(delivered.is_empty(), "{delivered:?}");
    assert_eq!(done.undeliverable, 1);
}

#[test]
fn answers_for_offers_another_node_never_delivered_are_refused_and_bad_bytes_are_errors() {
    let (mut a, mut b) = (node(), node());
    send(&mut a, conn(1), announce(1, 0, 0), 0);
    replicate(&mut a, A, &mut b, 0);
    send(&mut b, conn(9), announce(2, 5, 0), 0);
    replicate(&mut b, B, &mut a, 0);
    // The seeder on A answers an offer B's peer never made.
    let refused = send(&mut a, conn(1), answer(1, 2, Id20([100; 20])), 1);
    assert!(matches!(refused[..], [(_, ToConnection::AnswerRefused(_))]));
    assert!(a.relay_log().unwrap().is_empty());

    assert!(
        a.apply_relayed(b"\x01short", B, ServerTime(1), &mut |_| true)
            .is_err()
    );
    assert!(
        a.apply_changes(&[0; CHANGE_LEN_PLUS_ONE], 0, B, ServerTime(1), &mut |_| {
            true
        })
        .is_err()
    );
}

const CHANGE_LEN_PLUS_ONE: usize = crate::nodes::CHANGE_LEN + 1;
