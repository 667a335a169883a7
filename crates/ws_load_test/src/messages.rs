//! The JSON messages a simulated browser sends: announces carrying offers, scrapes,
//! and answers to offers the tracker forwarded.
//!
//! The three messages are kept as templates whose ids are overwritten for each send,
//! so building one allocates nothing: the offers' session descriptions are made once,
//! the JSON goes into a reused buffer, and the WebSocket payload is cut from a reused
//! [`BytesMut`] that gets its memory back once tungstenite has framed the message.

use bytes::BytesMut;
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use shoal_load_test_common::{Population, PopulationShape};
use shoal_ws_protocol::{
    AnnounceEvent, AnnounceRequest, ClientMessage, ForwardedOffer, Id20, Offer, RawJson,
    ScrapeRequest, WebRtcAnswer, write_client_message,
};
use tungstenite::{Message, Utf8Bytes};

use crate::config::Config;
use crate::flow::Request;

/// `left` of a leecher.
const LEECHER_LEFT: u64 = 1 << 20;

/// The population a config describes: every connection owns
/// `torrents_per_connection` simulated peers, each with a torrent drawn by popularity
/// and a seeder status.
pub(crate) fn population(config: &Config) -> Population {
    let r = &config.requests;
    Population::new(PopulationShape {
        torrents: r.torrents,
        peers: config.total_connections() * r.torrents_per_connection,
        popularity_shape: r.popularity_shape,
        seeder_probability: r.seeder_probability,
    })
}

/// One simulated browser, behind one connection: a peer id of its own, used in all
/// its torrents (trackers relay an answer only from the peer id the offer went to).
///
/// Its torrents are the same in every run; its peer id is numbered from a base
/// drawn for each run (see [`peer_id_base`]), so that two load testers against one
/// tracker do not take over each other's peers.
#[derive(Clone, Debug)]
pub(crate) struct Client {
    peer_id: Id20,
    /// Its torrents are population peers `first_peer..first_peer + started.len()`.
    first_peer: usize,
    /// Whether the current connection has announced each torrent yet.
    started: Vec<bool>,
    /// The torrent the next announce is in, with `torrent_order = "sequential"`.
    next: usize,
    /// Requests the current connection has sent.
    sent: u64,
}

impl Client {
    /// The browser behind connection `connection` (counted over all workers), with
    /// peer id number `id_base + connection`.
    pub(crate) fn new(connection: usize, torrents_per_connection: usize, id_base: usize) -> Self {
        Self {
            peer_id: Id20(Population::peer_id(id_base + connection)),
            first_peer: connection * torrents_per_connection,
            started: vec![false; torrents_per_connection],
            next: 0,
            sent: 0,
        }
    }

    /// How many of `wanted` requests the current connection may still send under a
    /// limit of `limit` per connection (0: no limit).
    pub(crate) fn allowed(&self, wanted: usize, limit: u64) -> usize {
        if limit == 0 {
            return wanted;
        }
        let left = limit.saturating_sub(self.sent);
        wanted.min(usize::try_from(left).unwrap_or(usize::MAX))
    }

    /// Its peer id.
    #[cfg(test)]
    pub(crate) fn peer_id(&self) -> Id20 {
        self.peer_id
    }

    /// A new connection: the tracker forgot this browser's torrents with the old one,
    /// so each is announced with `started` again.
    pub(crate) fn reconnected(&mut self) {
        self.started.fill(false);
        self.next = 0;
        self.sent = 0;
    }
}

/// A random base for one run's peer ids: a multiple of a million (a run has at most
/// a million connections) below 10^12 (peer ids have twelve digits).
pub(crate) fn peer_id_base() -> usize {
    (rand::random::<u64>() % 1_000_000) as usize * 1_000_000
}

/// Builds one worker's messages.
#[derive(Debug)]
pub(crate) struct MessageWriter {
    rng: SmallRng,
    announce: ClientMessage,
    answer: ClientMessage,
    scrape: ClientMessage,
    weight_announce: u32,
    total_weight: u32,
    scrape_max: usize,
    sequential: bool,
    json: Vec<u8>,
    staging: BytesMut,
}

impl MessageWriter {
    /// The writer of worker `worker`.
    pub(crate) fn new(config: &Config, worker: usize) -> Self {
        let r = &config.requests;
        let offer = fake_session_description("offer", r.offer_size);
        let answer = fake_session_description("answer", r.offer_size);
        let offers = (0..r.offers_per_announce)
            .map(|_| Offer {
                offer_id: Id20::default(),
                offer: offer.clone(),
            })
            .collect();
        Self {
            rng: SmallRng::seed_from_u64(0x7753_0000 ^ worker as u64),
            announce: ClientMessage::Announce(AnnounceRequest {
                info_hash: Id20::default(),
                peer_id: Id20::default(),
                event: AnnounceEvent::Update,
                left: Some(0),
                uploaded: Some(0),
                downloaded: Some(0),
                numwant: Some(r.numwant.into()),
                offers,
                answer: None,
            }),
            answer: ClientMessage::Announce(AnnounceRequest {
                info_hash: Id20::default(),
                peer_id: Id20::default(),
                event: AnnounceEvent::Update,
                left: None,
                uploaded: None,
                downloaded: None,
                numwant: None,
                offers: Vec::new(),
                answer: Some(WebRtcAnswer {
                    to_peer_id: Id20::default(),
                    offer_id: Id20::default(),
                    answer,
                }),
            }),
            scrape: ClientMessage::Scrape(ScrapeRequest {
                info_hashes: Vec::with_capacity(r.scrape_max_torrents),
            }),
            weight_announce: r.weight_announce,
            total_weight: r.weight_announce + r.weight_scrape,
            scrape_max: r.scrape_max_torrents,
            sequential: r.torrent_order == crate::config::TorrentOrder::Sequential,
            json: Vec::with_capacity(4096),
            staging: BytesMut::with_capacity(64 * 1024),
        }
    }

    /// Writes `client`'s next announce or scrape (chosen by weight) as JSON, and
    /// returns what it is; see [`json`](Self::json) and
    /// [`take_message`](Self::take_message).
    pub(crate) fn write_request(
        &mut self,
        client: &mut Client,
        population: &Population,
    ) -> Request {
        client.sent += 1;
        if self.rng.random_range(0..self.total_weight) < self.weight_announce {
            Request::Announce(Some(self.write_announce(client, population)))
        } else {
            self.write_scrape(population);
            Request::Scrape
        }
    }

    /// An announce in one of `client`'s torrents, picked at random or the next in
    /// turn (`torrent_order`), with fresh offer ids; returns its info hash.
    fn write_announce(&mut self, client: &mut Client, population: &Population) -> Id20 {
        let at = if self.sequential {
            let at = client.next;
            client.next = (at + 1) % client.started.len();
            at
        } else {
            self.rng.random_range(0..client.started.len())
        };
        let peer = population.peer(client.first_peer + at);
        let announce = announce_mut(&mut self.announce);
        announce.info_hash = Id20(*population.info_hash(peer.torrent as usize));
        announce.peer_id = client.peer_id;
        announce.event = if client.started[at] {
            AnnounceEvent::Update
        } else {
            client.started[at] = true;
            AnnounceEvent::Started
        };
        announce.left = Some(if peer.seeder { 0 } else { LEECHER_LEFT });
        for offer in &mut announce.offers {
            offer.offer_id = Id20(self.rng.random());
        }
        let info_hash = announce.info_hash;
        self.json.clear();
        write_client_message(&self.announce, &mut self.json);
        info_hash
    }

    /// A scrape of 1 to `scrape_max_torrents` torrents drawn by popularity.
    fn write_scrape(&mut self, population: &Population) {
        let ClientMessage::Scrape(scrape) = &mut self.scrape else {
            unreachable!("the scrape template is a scrape");
        };
        scrape.info_hashes.clear();
        for _ in 0..self.rng.random_range(1..=self.scrape_max) {
            let torrent = population.popular_torrent(&mut self.rng);
            scrape
                .info_hashes
                .push(Id20(*population.info_hash(torrent)));
        }
        self.json.clear();
        write_client_message(&self.scrape, &mut self.json);
    }

    /// `client`'s answer to `offer`: addressed to the offering peer, naming its offer.
    pub(crate) fn write_answer(&mut self, client: &Client, offer: &ForwardedOffer) {
        let announce = announce_mut(&mut self.answer);
        announce.info_hash = offer.info_hash;
        announce.peer_id = client.peer_id;
        let answer = announce
            .answer
            .as_mut()
            .expect("the answer template has an answer");
        answer.to_peer_id = offer.peer_id;
        answer.offer_id = offer.offer_id;
        self.json.clear();
        write_client_message(&self.answer, &mut self.json);
    }

    /// The JSON written last.
    #[cfg(test)]
    pub(crate) fn json(&self) -> &[u8] {
        &self.json
    }

    /// The JSON written last as a WebSocket text message.
    pub(crate) fn take_message(&mut self) -> Message {
        self.staging.extend_from_slice(&self.json);
        let payload = self.staging.split().freeze();
        Message::Text(Utf8Bytes::try_from(payload).expect("serde_json writes UTF-8"))
    }
}

fn announce_mut(message: &mut ClientMessage) -> &mut AnnounceRequest {
    let ClientMessage::Announce(announce) = message else {
        unreachable!("announce templates are announces");
    };
    announce
}

/// A WebRTC session description (`{"type":…,"sdp":…}`) of a data-channel-only peer,
/// padded or cut to `size` bytes of SDP: what browsers put in offers and answers, so
/// messages have a realistic size.
pub(crate) fn fake_session_description(kind: &str, size: usize) -> RawJson {
    let mut sdp = String::with_capacity(size + 16);
    sdp.push_str(
        "v=0\r\no=- 5207311740922837364 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n\
         a=group:BUNDLE 0\r\na=extmap-allow-mixed\r\na=msid-semantic: WMS\r\n\
         m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\nc=IN IP4 0.0.0.0\r\n\
         a=ice-ufrag:sHoL\r\na=ice-pwd:shoalwsloadtesterfakeicepwd1\r\n\
         a=ice-options:trickle\r\na=fingerprint:sha-256 ",
    );
    for byte in 0..32u8 {
        let separator = if byte == 31 { "" } else { ":" };
        sdp.push_str(&format!("{:02X}{separator}", byte.wrapping_mul(37)));
    }
    sdp.push_str(
        "\r\na=setup:actpass\r\na=mid:0\r\na=sctp-port:5000\r\na=max-message-size:262144\r\n",
    );
    if sdp.len() < size {
        sdp.push_str("a=x-pad:");
        while sdp.len() + 2 < size {
            sdp.push('x');
        }
        sdp.push_str("\r\n");
    }
    // ASCII only, so any length is a character boundary.
    sdp.truncate(size);
    let json = serde_json::json!({ "type": kind, "sdp": sdp }).to_string();
    serde_json::value::RawValue::from_string(json).expect("serde_json writes valid JSON")
}

#[cfg(test)]
mod tests {
    use shoal_ws_protocol::parse_client_message;

    use super::*;

    fn config() -> Config {
        let mut config = Config {
            connections_per_worker: 4,
            ..Config::default()
        };
        config.requests.torrents = 20;
        config.requests.torrents_per_connection = 3;
        config.requests.weight_scrape = 50;
        config
    }

    #[test]
    fn requests_parse_as_the_tracker_reads_them() {
        let config = config();
        let population = population(&config);
        let mut writer = MessageWriter::new(&config, 0);
        let mut client = Client::new(2, 3, 0);
        let torrents: Vec<Id20> = (6..9)
            .map(|peer| Id20(*population.info_hash(population.peer(peer).torrent as usize)))
            .collect();
        let (mut announces, mut scrapes, mut started) = (0, 0, 0);
        let mut offer_ids = std::collections::HashSet::new();
        for _ in 0..1000 {
            let request = writer.write_request(&mut client, &population);
            match (request, parse_client_message(writer.json()).unwrap()) {
                (Request::Announce(info_hash), ClientMessage::Announce(announce)) => {
                    announces += 1;
                    assert_eq!(info_hash, Some(announce.info_hash));
                    assert_eq!(announce.peer_id, Id20(*b"-SL0001-000000000002"));
                    assert!(torrents.contains(&announce.info_hash));
                    assert_eq!(announce.numwant, Some(5));
                    assert_eq!(announce.offers.len(), 5);
                    assert!(announce.answer.is_none());
                    for offer in &announce.offers {
                        assert!(offer_ids.insert(offer.offer_id), "offer ids repeat");
                        assert!(offer.offer.get().contains("\"type\":\"offer\""));
                    }
                    started += usize::from(announce.event == AnnounceEvent::Started);
                }
                (Request::Scrape, ClientMessage::Scrape(scrape)) => {
                    scrapes += 1;
                    assert!((1..=10).contains(&scrape.info_hashes.len()));
                }
                (request, message) => panic!("{request:?} wrote {message:?}"),
            }
        }
        assert!(announces > 300 && scrapes > 300, "{announces} {scrapes}");
        // One `started` per torrent of the client (fewer if two share a torrent).
        assert!((1..=3).contains(&started), "{started}");
        client.reconnected();
        assert!(client.started.iter().all(|started| !started));
    }

    #[test]
    fn sequential_connections_announce_each_torrent_once_then_stop() {
        let mut config = config();
        config.requests.weight_scrape = 0;
        config.requests.torrent_order = crate::config::TorrentOrder::Sequential;
        let population = population(&config);
        let mut writer = MessageWriter::new(&config, 0);
        let mut client = Client::new(1, 3, 0);
        let limit = 3;
        let mut seen = Vec::new();
        while client.allowed(1, limit) == 1 {
            match writer.write_request(&mut client, &population) {
                Request::Announce(Some(info_hash)) => seen.push(info_hash),
                other => panic!("{other:?}"),
            }
            assert!(seen.len() <= 3, "the limit stops it");
        }
        let torrents: Vec<Id20> = (3..6)
            .map(|peer| Id20(*population.info_hash(population.peer(peer).torrent as usize)))
            .collect();
        assert_eq!(seen, torrents, "each torrent once, in order");
        assert_eq!(client.allowed(5, limit), 0);
        assert_eq!(client.allowed(5, 0), 5, "0 is no limit");
        // A new connection announces them all again.
        client.reconnected();
        assert_eq!(client.allowed(5, limit), 3);
        let Request::Announce(Some(first)) = writer.write_request(&mut client, &population) else {
            panic!("an announce");
        };
        assert_eq!(first, torrents[0]);
    }

    #[test]
    fn runs_number_their_peer_ids_apart() {
        let base = peer_id_base();
        assert_eq!(base % 1_000_000, 0);
        assert!(base < 1_000_000_000_000);
        let id = Client::new(7, 1, 123_000_000).peer_id();
        assert_eq!(id, Id20(*b"-SL0001-000123000007"));
    }

    #[test]
    fn answers_name_the_offer_and_its_peer() {
        let config = config();
        let mut writer = MessageWriter::new(&config, 0);
        let client = Client::new(1, 3, 0);
        let offer = ForwardedOffer {
            info_hash: Id20([7; 20]),
            peer_id: Id20([8; 20]),
            offer_id: Id20([0xf0; 20]),
            offer: fake_session_description("offer", 10),
        };
        writer.write_answer(&client, &offer);
        let ClientMessage::Announce(announce) = parse_client_message(writer.json()).unwrap() else {
            panic!("not an announce");
        };
        assert_eq!(announce.info_hash, offer.info_hash);
        assert_eq!(announce.peer_id, client.peer_id());
        assert!(announce.offers.is_empty());
        let answer = announce.answer.unwrap();
        assert_eq!(answer.to_peer_id, offer.peer_id);
        assert_eq!(answer.offer_id, offer.offer_id);
        assert!(answer.answer.get().contains("\"type\":\"answer\""));
    }

    #[test]
    fn session_descriptions_have_the_size_asked_for() {
        for size in [1, 50, 400, 405, 500, 1500] {
            let json = fake_session_description("offer", size);
            let value: serde_json::Value = serde_json::from_str(json.get()).unwrap();
            assert_eq!(value["sdp"].as_str().unwrap().len(), size);
            assert_eq!(value["type"], "offer");
        }
        assert!(fake_session_description("offer", 500).get().len() > 500);
    }

    #[test]
    fn messages_reuse_the_staging_buffer() {
        let config = config();
        let population = population(&config);
        let mut writer = MessageWriter::new(&config, 0);
        let mut client = Client::new(0, 3, 0);
        let start = writer.staging.as_ptr() as usize;
        let capacity = writer.staging.capacity();
        for _ in 0..1000 {
            writer.write_request(&mut client, &population);
            let json = writer.json().to_vec();
            let Message::Text(text) = writer.take_message() else {
                panic!("not text");
            };
            assert_eq!(text.as_bytes(), &json[..]);
            // Each message is dropped before the next (as once framed), so all of them
            // live in the first buffer.
            let at = text.as_bytes().as_ptr() as usize;
            assert!(at >= start && at + json.len() <= start + capacity);
        }
    }
}
