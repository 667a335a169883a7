//! The flat JSON object every WebTorrent message is: which fields are present says
//! what the message is. Read into [`WireIn`], written from [`WireOut`]; the field names
//! are spelled only here.

use std::fmt;

use serde::de::{self, Visitor};
use serde::ser::SerializeMap as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

use crate::id::Id20;
use crate::{Action, RawJson};

/// `info_hash`: one id (announce, scrape) or a list (scrape).
#[derive(Debug)]
pub(crate) enum OneOrMany {
    One(Id20),
    Many(Vec<Id20>),
}

impl<'de> Deserialize<'de> for OneOrMany {
    /// By hand rather than `untagged`, so a bad id gets the id's own error message.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct OneOrManyVisitor;
        impl<'de> Visitor<'de> for OneOrManyVisitor {
            type Value = OneOrMany;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an info hash or a list of info hashes")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<OneOrMany, E> {
                Id20::from_chars(text)
                    .map(OneOrMany::One)
                    .ok_or_else(|| E::custom(crate::id::INVALID_ID))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<OneOrMany, A::Error> {
                let mut ids = Vec::new();
                while let Some(id) = seq.next_element()? {
                    ids.push(id);
                }
                Ok(OneOrMany::Many(ids))
            }
        }
        deserializer.deserialize_any(OneOrManyVisitor)
    }
}

/// Counts of one torrent in a scrape reply.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScrapeFile {
    /// Seeders.
    pub complete: u64,
    /// Leechers.
    pub incomplete: u64,
    /// Completed downloads.
    pub downloaded: u64,
}

/// `files` of a scrape reply, in the order sent.
#[derive(Debug, Default)]
pub(crate) struct FilesIn(pub(crate) Vec<(Id20, ScrapeFile)>);

impl<'de> Deserialize<'de> for FilesIn {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FilesVisitor;
        impl<'de> Visitor<'de> for FilesVisitor {
            type Value = FilesIn;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map from info hash to counts")
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<FilesIn, A::Error> {
                let mut files = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    files.push(entry);
                }
                Ok(FilesIn(files))
            }
        }
        deserializer.deserialize_map(FilesVisitor)
    }
}

/// One entry of `offers`.
#[derive(Debug, Deserialize)]
pub(crate) struct WireOfferIn {
    pub(crate) offer: RawJson,
    pub(crate) offer_id: Id20,
}

/// Any message, as read.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct WireIn {
    pub(crate) action: Option<Action>,
    pub(crate) info_hash: Option<OneOrMany>,
    pub(crate) peer_id: Option<Id20>,
    pub(crate) to_peer_id: Option<Id20>,
    pub(crate) offer_id: Option<Id20>,
    #[serde(deserialize_with = "lenient_count")]
    pub(crate) uploaded: Option<u64>,
    #[serde(deserialize_with = "lenient_count")]
    pub(crate) downloaded: Option<u64>,
    #[serde(deserialize_with = "lenient_count")]
    pub(crate) left: Option<u64>,
    pub(crate) event: Option<String>,
    #[serde(deserialize_with = "lenient_count")]
    pub(crate) numwant: Option<u64>,
    pub(crate) offers: Option<Vec<WireOfferIn>>,
    pub(crate) offer: Option<RawJson>,
    pub(crate) answer: Option<RawJson>,
    #[serde(deserialize_with = "lenient_count")]
    pub(crate) interval: Option<u64>,
    #[serde(deserialize_with = "lenient_count")]
    pub(crate) complete: Option<u64>,
    #[serde(deserialize_with = "lenient_count")]
    pub(crate) incomplete: Option<u64>,
    pub(crate) files: Option<FilesIn>,
    #[serde(rename = "failure reason")]
    pub(crate) failure_reason: Option<String>,
    #[serde(rename = "warning message")]
    pub(crate) warning_message: Option<String>,
}

/// One entry of `offers`, as written.
#[derive(Debug, Serialize)]
pub(crate) struct WireOfferOut<'a> {
    pub(crate) offer: &'a RawValue,
    pub(crate) offer_id: Id20,
}

/// `info_hash` as written.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum OneOrManyOut<'a> {
    One(Id20),
    Many(&'a [Id20]),
}

/// `files` of a scrape reply: a map from info hash to counts.
#[derive(Debug)]
pub(crate) struct FilesOut<'a>(pub(crate) &'a [(Id20, ScrapeFile)]);

impl Serialize for FilesOut<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (hash, file) in self.0 {
            map.serialize_entry(hash, file)?;
        }
        map.end()
    }
}

/// Any message, as written; absent fields are left out.
#[derive(Debug, Default, Serialize)]
pub(crate) struct WireOut<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) action: Option<Action>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) info_hash: Option<OneOrManyOut<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) peer_id: Option<Id20>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) to_peer_id: Option<Id20>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) offer_id: Option<Id20>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) uploaded: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) downloaded: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) left: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) event: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) numwant: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) offers: Option<Vec<WireOfferOut<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) offer: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) answer: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) interval: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) complete: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) incomplete: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) files: Option<FilesOut<'a>>,
    #[serde(rename = "failure reason", skip_serializing_if = "Option::is_none")]
    pub(crate) failure_reason: Option<&'a str>,
}

/// A count sent by JavaScript: an integer, a float (JavaScript has no other
/// numbers), or null (`JSON.stringify(Infinity)`, e.g. `left` of a torrent whose size
/// is not known yet). Negative and non-finite values read as absent.
fn lenient_count<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    struct CountVisitor;
    impl<'de> Visitor<'de> for CountVisitor {
        type Value = Option<u64>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a number or null")
        }
        fn visit_u64<E: de::Error>(self, value: u64) -> Result<Self::Value, E> {
            Ok(Some(value))
        }
        fn visit_i64<E: de::Error>(self, value: i64) -> Result<Self::Value, E> {
            Ok(u64::try_from(value).ok())
        }
        fn visit_f64<E: de::Error>(self, value: f64) -> Result<Self::Value, E> {
            // `as` saturates; 2^64 and above read as u64::MAX.
            Ok((value.is_finite() && value >= 0.0).then_some(value as u64))
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, inner: D) -> Result<Self::Value, D::Error> {
            inner.deserialize_any(self)
        }
    }
    deserializer.deserialize_option(CountVisitor)
}
