//! Round trips of every message kind, and no panic on any input.

use proptest::prelude::*;
use serde_json::value::RawValue;
use shoal_ws_protocol::{
    AnnounceEvent, AnnounceRequest, AnnounceResponse, ClientMessage, ErrorResponse,
    ForwardedAnswer, ForwardedOffer, Id20, Offer, ScrapeFile, ScrapeRequest, ScrapeResponse,
    ServerMessage, WebRtcAnswer, parse_client_message, parse_server_message, write_client_message,
    write_server_message,
};

fn id() -> impl Strategy<Value = Id20> {
    any::<[u8; 20]>().prop_map(Id20)
}

fn sdp() -> impl Strategy<Value = Box<RawValue>> {
    "[ -~]{0,40}".prop_map(|text| {
        let json = serde_json::json!({ "type": "offer", "sdp": text }).to_string();
        RawValue::from_string(json).unwrap()
    })
}

fn event() -> impl Strategy<Value = AnnounceEvent> {
    prop_oneof![
        Just(AnnounceEvent::Started),
        Just(AnnounceEvent::Stopped),
        Just(AnnounceEvent::Completed),
        Just(AnnounceEvent::Update),
    ]
}

prop_compose! {
    fn announce()(
        info_hash in id(),
        peer_id in id(),
        event in event(),
        left in proptest::option::of(any::<u64>()),
        numwant in proptest::option::of(0u64..100),
        offers in proptest::collection::vec((id(), sdp()), 0..4),
        answer in proptest::option::of((id(), id(), sdp())),
    ) -> AnnounceRequest {
        AnnounceRequest {
            info_hash,
            peer_id,
            event,
            left,
            uploaded: Some(1),
            downloaded: None,
            numwant,
            offers: offers.into_iter().map(|(offer_id, offer)| Offer { offer_id, offer }).collect(),
            answer: answer.map(|(to_peer_id, offer_id, answer)| WebRtcAnswer { to_peer_id, offer_id, answer }),
        }
    }
}

proptest! {
    #[test]
    fn announces_round_trip(request in announce()) {
        let mut out = Vec::new();
        write_client_message(&ClientMessage::Announce(request), &mut out);
        let ClientMessage::Announce(again) = parse_client_message(&out).unwrap() else {
            panic!("not an announce");
        };
        let mut out_again = Vec::new();
        write_client_message(&ClientMessage::Announce(again), &mut out_again);
        prop_assert_eq!(out, out_again);
    }

    #[test]
    fn scrapes_round_trip(hashes in proptest::collection::vec(id(), 0..5)) {
        let mut out = Vec::new();
        write_client_message(&ClientMessage::Scrape(ScrapeRequest { info_hashes: hashes.clone() }), &mut out);
        let ClientMessage::Scrape(again) = parse_client_message(&out).unwrap() else {
            panic!("not a scrape");
        };
        prop_assert_eq!(again.info_hashes, hashes);
    }

    #[test]
    fn server_messages_round_trip(
        info_hash in id(), peer_id in id(), offer_id in id(), description in sdp(),
        counts in any::<(u32, u32, u32)>(), kind in 0..5u8,
    ) {
        let message = match kind {
            0 => ServerMessage::AnnounceResponse(AnnounceResponse {
                info_hash, complete: counts.0.into(), incomplete: counts.1.into(), interval: counts.2.into(),
            }),
            1 => ServerMessage::Offer(ForwardedOffer { info_hash, peer_id, offer_id, offer: description }),
            2 => ServerMessage::Answer(ForwardedAnswer { info_hash, peer_id, offer_id, answer: description }),
            3 => ServerMessage::Scrape(ScrapeResponse { files: vec![
                (info_hash, ScrapeFile { complete: 1, incomplete: counts.0.into(), downloaded: 3 }),
                (peer_id, ScrapeFile::default()),
            ]}),
            _ => ServerMessage::Error(ErrorResponse {
                action: Some(shoal_ws_protocol::Action::Announce),
                info_hash: Some(info_hash),
                reason: "nope \"quoted\"".into(),
                interval: (counts.0 % 2 == 1).then_some(u64::from(counts.0)),
            }),
        };
        let mut out = Vec::new();
        write_server_message(&message, &mut out);
        let again = parse_server_message(&out).unwrap();
        let mut out_again = Vec::new();
        write_server_message(&again, &mut out_again);
        prop_assert_eq!(String::from_utf8(out).unwrap(), String::from_utf8(out_again).unwrap());
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse_client_message(&bytes);
        let _ = parse_server_message(&bytes);
    }

    #[test]
    fn arbitrary_json_objects_never_panic(
        fields in proptest::collection::vec((
            prop_oneof![
                Just("action"), Just("info_hash"), Just("peer_id"), Just("offers"), Just("answer"),
                Just("to_peer_id"), Just("offer_id"), Just("numwant"), Just("left"), Just("event"),
                Just("files"), Just("offer"), Just("interval"),
            ],
            prop_oneof![
                Just(serde_json::json!("announce")),
                Just(serde_json::json!("scrape")),
                Just(serde_json::json!(null)),
                Just(serde_json::json!(-1)),
                Just(serde_json::json!(1.5e300)),
                Just(serde_json::json!([])),
                Just(serde_json::json!({})),
                Just(serde_json::json!([{"offer": {}, "offer_id": "aaaaaaaaaaaaaaaaaaaa"}])),
                Just(serde_json::json!("aaaaaaaaaaaaaaaaaaaa")),
                Just(serde_json::json!(["aaaaaaaaaaaaaaaaaaaa", "x"])),
                "\\PC{0,30}".prop_map(serde_json::Value::String),
            ],
        ), 0..8),
    ) {
        let object: serde_json::Map<String, serde_json::Value> =
            fields.into_iter().map(|(key, value)| (key.to_string(), value)).collect();
        let bytes = serde_json::to_vec(&object).unwrap();
        let _ = parse_client_message(&bytes);
        let _ = parse_server_message(&bytes);
    }
}

#[test]
fn reference_client_messages_parse() {
    // As bittorrent-tracker's websocket client writes them.
    let hash = "\u{12}\u{34}\u{56}\u{78}\u{9a}\u{bc}\u{de}\u{f0}\u{12}\u{34}\u{56}\u{78}\u{9a}\u{bc}\u{de}\u{f0}\u{12}\u{34}\u{56}\u{78}";
    let announce = serde_json::json!({
        "action": "announce", "info_hash": hash, "peer_id": "-WW0208-abcdefghijkl",
        "uploaded": 0, "downloaded": 0, "left": null, "event": "started", "numwant": 5,
        "offers": [{"offer": {"type": "offer", "sdp": "v=0\r\n"}, "offer_id": "00000000000000000001"}],
    });
    let ClientMessage::Announce(request) =
        parse_client_message(announce.to_string().as_bytes()).unwrap()
    else {
        panic!("not an announce");
    };
    assert_eq!(request.info_hash.0[4], 0x9a);
    assert_eq!(request.event, AnnounceEvent::Started);
    assert_eq!(request.left, None);
    assert_eq!(request.offers.len(), 1);
    let offer: serde_json::Value = serde_json::from_str(request.offers[0].offer.get()).unwrap();
    assert_eq!(
        offer,
        serde_json::json!({"type": "offer", "sdp": "v=0\r\n"})
    );

    let answer = serde_json::json!({
        "action": "announce", "info_hash": hash, "peer_id": "-WW0208-abcdefghijkl",
        "to_peer_id": "-WW0208-mnopqrstuvwx", "offer_id": "00000000000000000001",
        "answer": {"type": "answer", "sdp": "v=0"},
    });
    let ClientMessage::Announce(request) =
        parse_client_message(answer.to_string().as_bytes()).unwrap()
    else {
        panic!("not an announce");
    };
    assert_eq!(
        request.answer.unwrap().to_peer_id,
        Id20(*b"-WW0208-mnopqrstuvwx")
    );
}

#[test]
fn errors_say_what_is_wrong_and_name_the_request() {
    let err = parse_client_message(br#"{"action":"announce","info_hash":"aaaaaaaaaaaaaaaaaaaa"}"#)
        .unwrap_err();
    assert_eq!(err.reason, "an announce needs a peer_id");
    assert_eq!(err.info_hash, Some(Id20([b'a'; 20])));
    let err = parse_client_message(br#"{"action":"announce","info_hash":"short"}"#).unwrap_err();
    assert!(err.reason.contains("20 characters"), "{}", err.reason);
    let err = parse_client_message(b"{not json").unwrap_err();
    assert!(err.reason.starts_with("invalid message"), "{}", err.reason);
    let err = parse_client_message(br#"{"action":"dance"}"#).unwrap_err();
    assert!(err.reason.contains("unknown variant"), "{}", err.reason);
}

#[test]
fn error_replies_are_what_the_reference_client_reads() {
    let mut out = Vec::new();
    write_server_message(
        &ServerMessage::Error(ErrorResponse {
            action: Some(shoal_ws_protocol::Action::Announce),
            info_hash: Some(Id20([b'z'; 20])),
            reason: "info hash not allowed".into(),
            interval: None,
        }),
        &mut out,
    );
    assert_eq!(
        String::from_utf8(out).unwrap(),
        r#"{"action":"announce","info_hash":"zzzzzzzzzzzzzzzzzzzz","failure reason":"info hash not allowed"}"#
    );
}

/// What a `MessageReader` gives for `reads` in turn: events as text, an error as its
/// close code (the last entry).
fn read_frames(reads: &[&[u8]]) -> Vec<Result<String, u16>> {
    use shoal_ws_protocol::frames::{Event, MessageReader};
    let total: usize = reads.iter().map(|read| read.len()).sum();
    let mut reader = MessageReader::new(200, 250);
    let mut got = Vec::new();
    for read in reads {
        let mut read = read.to_vec();
        let mut at = 0;
        loop {
            match reader.next(&mut read, &mut at) {
                Ok(None) => break,
                Ok(Some(event)) => {
                    // A frame takes two bytes at least: more events than that is one
                    // frame reported again and again.
                    assert!(got.len() < total / 2, "a frame read twice: {got:?}");
                    got.push(Ok(match event {
                        Event::Text(text) => format!("text {text:?}"),
                        other => format!("{other:?}"),
                    }));
                }
                Err(error) => {
                    got.push(Err(error.close_code()));
                    return got;
                }
            }
        }
    }
    got
}

/// A client frame: any opcode a client may send (or not), final or not, masked or
/// (rarely) not, of a length that fits the reader's limits or just passes them.
fn client_frame() -> impl Strategy<Value = Vec<u8>> {
    (
        prop_oneof![4 => 0u8..=2, 3 => 8u8..=10, 1 => any::<u8>()],
        any::<bool>(),
        prop_oneof![9 => Just(true), 1 => Just(false)],
        any::<[u8; 4]>(),
        prop_oneof![
            4 => proptest::collection::vec(any::<u8>(), 0..8),
            2 => proptest::collection::vec(b'a'..=b'z', 0..130),
            1 => proptest::collection::vec(any::<u8>(), 195..=205),
        ],
    )
        .prop_map(|(opcode, fin, masked, mask, payload)| {
            let mut frame = vec![(u8::from(fin) << 7) | (opcode & 0x8f)];
            let length = u8::from(masked) << 7;
            match payload.len() {
                len @ 0..=125 => frame.push(length | len as u8),
                len => {
                    frame.push(length | 126);
                    frame.extend_from_slice(&(len as u16).to_be_bytes());
                }
            }
            if masked {
                frame.extend_from_slice(&mask);
            }
            frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
            frame
        })
}

proptest! {
    /// Any bytes, split into two reads anywhere, give the reader the same events (or
    /// the same error) as in one read.
    #[test]
    fn the_message_reader_reads_any_bytes_split_anywhere_alike(
        bytes in proptest::collection::vec(any::<u8>(), 0..300),
        split in any::<prop::sample::Index>(),
    ) {
        let at = split.index(bytes.len() + 1);
        prop_assert_eq!(read_frames(&[&bytes]), read_frames(&[&bytes[..at], &bytes[at..]]));
    }

    /// Streams of frames, well formed or nearly (random bytes mostly stop at the first
    /// header), read alike in one read and in three split anywhere.
    #[test]
    fn the_message_reader_reads_streams_of_frames_split_anywhere_alike(
        frames in proptest::collection::vec(client_frame(), 0..12),
        splits in any::<[prop::sample::Index; 2]>(),
    ) {
        let bytes = frames.concat();
        let mut at = [splits[0].index(bytes.len() + 1), splits[1].index(bytes.len() + 1)];
        at.sort_unstable();
        let whole = read_frames(&[&bytes]);
        prop_assert_eq!(
            &whole,
            &read_frames(&[&bytes[..at[0]], &bytes[at[0]..at[1]], &bytes[at[1]..]])
        );
        let tiny: Vec<&[u8]> = bytes.chunks(1).collect();
        prop_assert_eq!(&whole, &read_frames(&tiny));
    }
}
