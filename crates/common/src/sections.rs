//! Two config types in one TOML table.
//!
//! A tracker's file is the process's sections (`[logging]`, `[metrics]`,
//! `[privileges]`) next to the tracker's own keys; a tracker's section in the combined
//! `shoal` file is an `enabled` switch next to the same keys. serde's `flatten` would
//! express that but cannot be combined with `deny_unknown_fields`, which every config
//! type keeps so that a misspelt key is an error. [`Both`] does it by hand: the first
//! type takes the keys its documentation names, the second gets the rest and still
//! rejects what it does not know.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use shoal_toml_config::{Docs, TomlConfig};

/// `first`'s keys and `second`'s keys side by side in one table; `-p` prints the first's
/// before the second's, under the second's heading comment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Both<A, B> {
    /// The type whose keys are taken out first.
    pub first: A,
    /// The type that gets every other key.
    pub second: B,
}

/// The keys a documented struct type has.
fn keys_of<T: TomlConfig>() -> Vec<&'static str> {
    match T::docs() {
        Docs::Struct { fields, .. } => fields.iter().map(|field| field.key).collect(),
        _ => Vec::new(),
    }
}

impl<A: TomlConfig, B: TomlConfig> TomlConfig for Both<A, B> {
    fn docs() -> Docs {
        let (
            Docs::Struct { fields: first, .. },
            Docs::Struct {
                doc,
                fields: second,
            },
        ) = (A::docs(), B::docs())
        else {
            panic!("Both joins two struct types");
        };
        Docs::Struct {
            doc,
            fields: first.into_iter().chain(second).collect(),
        }
    }
}

impl<A: Serialize, B: Serialize> Serialize for Both<A, B> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error as _;
        let mut table = toml::Table::try_from(&self.first).map_err(S::Error::custom)?;
        let second = toml::Table::try_from(&self.second).map_err(S::Error::custom)?;
        for (key, value) in second {
            if table.insert(key.clone(), value).is_some() {
                return Err(S::Error::custom(format!("key {key:?} on both sides")));
            }
        }
        table.serialize(serializer)
    }
}

impl<'de, A, B> Deserialize<'de> for Both<A, B>
where
    A: TomlConfig + for<'a> Deserialize<'a>,
    B: for<'a> Deserialize<'a>,
{
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut rest = toml::Table::deserialize(deserializer)?;
        let mut taken = toml::Table::new();
        for key in keys_of::<A>() {
            if let Some(value) = rest.remove(key) {
                taken.insert(key.to_string(), value);
            }
        }
        Ok(Self {
            first: A::deserialize(toml::Value::Table(taken)).map_err(D::Error::custom)?,
            second: B::deserialize(toml::Value::Table(rest)).map_err(D::Error::custom)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A switch.
    #[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
    #[serde(default, deny_unknown_fields)]
    struct Switch {
        /// On or off.
        enabled: bool,
    }

    /// Some settings.
    #[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
    #[serde(default, deny_unknown_fields)]
    struct Settings {
        /// A number.
        count: u32,
        /// A section.
        inner: Switch,
    }

    type Joined = Both<Switch, Settings>;

    #[test]
    fn keys_go_to_their_side_and_round_trip() {
        let joined: Joined =
            toml::from_str("enabled = true\ncount = 3\n[inner]\nenabled = true\n").expect("parses");
        assert!(joined.first.enabled);
        assert_eq!(joined.second.count, 3);
        assert!(joined.second.inner.enabled);
        let printed = shoal_toml_config::to_commented_toml(&joined).expect("prints");
        assert!(printed.starts_with("# Some settings."), "{printed}");
        assert!(printed.find("enabled").unwrap() < printed.find("count").unwrap());
        assert_eq!(
            toml::from_str::<Joined>(&printed).expect("reparses"),
            joined
        );
    }

    #[test]
    fn unknown_keys_are_still_rejected() {
        let err = toml::from_str::<Joined>("cuont = 3\n").unwrap_err();
        assert!(err.to_string().contains("cuont"), "{err}");
        let err = toml::from_str::<Joined>("[inner]\nenabld = true\n").unwrap_err();
        assert!(err.to_string().contains("enabld"), "{err}");
    }
}
